"""Docs that stay true (issue 26): the facts the README, the decision records, CONTRIBUTING and
docs/architecture.md state about the tree are checked against the tree, so they cannot drift quietly."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.tiers import TIERS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = sorted(p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"])


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a Markdown text (up to the next heading of that level)."""
    body = text.split(f"\n{heading}\n", 1)[1]
    return re.split(r"\n## ", body, maxsplit=1)[0]


def test_decision_records_are_titled_with_their_own_number() -> None:
    wrong = [
        f"{path.name}: {path.read_text().splitlines()[0]!r}"
        for path in sorted((ROOT / "docs" / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
        if not path.read_text().startswith(f"# {path.name[:4]}: ")
    ]
    assert wrong == [], f"a decision record's title starts '# NNNN: ' with its file's number: {wrong}"


def test_the_readme_sets_up_with_exactly_two_commands() -> None:
    block = section((ROOT / "README.md").read_text(), "## Set up").split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_the_readme_states_no_test_count_or_suite_time() -> None:
    """How many tests there are and how long they take change with every branch: docs/testing.md keeps
    the measurements, dated, with their commands."""
    readme = (ROOT / "README.md").read_text()
    assert not re.search(r"\b\d[\d,]*\s+tests\b", readme)
    assert not re.search(r"\babout \d+ minutes\b", readme)


def test_contributing_names_no_machine_paths_and_every_package() -> None:
    text = (ROOT / "docs" / "CONTRIBUTING-helpers.md").read_text()
    assert not re.findall(r"(?<![\w.])/(?:work|root|home|tmp)/\S*", text), "paths of one machine"
    assert not re.search(r"\b(?:five|six|seven) packages\b", text), "a count that drifts: name them"
    missing = [p for p in PACKAGES if f"`{p}`" not in text]
    assert missing == [], f"packages CONTRIBUTING does not name: {missing}"


def _forbidden_by_prose(text: str) -> dict[str, set[str]]:
    """What docs/architecture.md's "Import rules" bullets forbid, per package (or sub-package, dotted).
    Understood forms: "`a` imports nothing of ours; neither does `b`", "`a` imports only `b`", "`a` never
    imports `b` or `c`", "`a` and `b` never import `c` or `d`"; what follows a ':' explains."""
    ours = set(PYPROJECT["tool"]["importlinter"]["root_packages"])
    rules: dict[str, set[str]] = {}
    for line in section(text, "## Import rules").splitlines():
        if not line.startswith("- "):
            continue
        names = re.findall(r"`([a-z_.]+)`", line)
        source = names[0]
        if "imports nothing of ours" in line:
            rules[source] = ours - {source}
            for other in re.findall(r"neither does `([a-z_]+)`", line):
                rules[other] = ours - {other}
        elif "imports only" in line:
            allowed = set(re.findall(r"`([a-z_]+)`", line.split("imports only", 1)[1].split("(", 1)[0]))
            rules[source] = ours - {source} - allowed
        elif verb := next((v for v in ("never imports", "never import") if v in line), None):
            before, after = line.split(verb, 1)
            forbidden = set(re.findall(r"`([a-z_.]+)`", after.split(":", 1)[0].split("(", 1)[0]))
            for each in re.findall(r"`([a-z_.]+)`", before):
                rules[each] = forbidden
        else:
            raise AssertionError(f"an import rule this check cannot read (say it in one of the forms above): {line}")
    return rules


def test_the_import_rules_prose_and_the_contracts_say_the_same() -> None:
    prose = _forbidden_by_prose((ROOT / "docs" / "architecture.md").read_text())
    contracts: dict[str, set[str]] = {}
    for contract in PYPROJECT["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "forbidden":
            for source in contract["source_modules"]:
                contracts.setdefault(source, set()).update(contract["forbidden_modules"])
    assert prose == contracts


def test_the_testing_doc_and_pyproject_know_every_tier() -> None:
    doc = (ROOT / "docs" / "testing.md").read_text()
    declared = {marker.split(":", 1)[0] for marker in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]}
    for tier in TIERS:
        assert f"-m {tier}" in doc, f"docs/testing.md does not say how to run the {tier} tier"
        assert tier in declared, f"pyproject.toml does not declare the {tier} marker"
