"""docs/benchmarks.md stays runnable and stays a results table, not a diary: it opens with one row per goal
(the latest result, a verdict, its date and the command), every command it gives names a script in bench/
that accepts every option the line mentions, and the dated story lives in docs/benchmarks-history.md."""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "benchmarks.md").read_text()
HEADER = ["goal", "latest result", "verdict", "date", "command"]
VERDICTS = {"met", "not met", "partly met", "measured"}


def results_rows() -> list[list[str]]:
    """The cells of each row of the table under "## Results" (header and separator left out)."""
    section = DOC.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows and [c.strip() for c in rows[0].strip("|").split("|")] == HEADER, rows[:1]
    return [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows[2:]]


ROWS = results_rows()
COMMANDS = [line for line in DOC.splitlines() if line.startswith("python bench/")] + [row[4].strip("`") for row in ROWS]
SCRIPTS = {
    f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__":' in p.read_text()
}  # the scripts, not their shared modules


def test_the_doc_gives_a_command_for_every_benchmark():
    assert {line.split()[1] for line in COMMANDS} == SCRIPTS


def test_the_results_table_comes_first_and_has_a_row_for_every_benchmark():
    assert DOC.split("\n## ", 2)[1].startswith("Results\n"), "the results table is the doc's first section"
    assert {row[4].strip("`").split()[1] for row in ROWS} == SCRIPTS


@pytest.mark.parametrize("row", ROWS, ids=[row[0][:40] for row in ROWS])
def test_each_result_row_is_complete(row: list[str]):
    goal, result, verdict, when, command = row
    assert len(row) == len(HEADER) and goal and result
    assert verdict in VERDICTS, f"verdict {verdict!r} is not one of {sorted(VERDICTS)}"
    assert date.fromisoformat(when) <= datetime.now(UTC).date(), when
    assert re.fullmatch(r"`python bench/[a-z0-9_]+\.py( [^`|]*)?`", command), command


def test_dates_appear_only_in_the_table():
    """A dated paragraph is a diary entry: it goes to docs/benchmarks-history.md."""
    dated = [line for line in DOC.splitlines() if re.search(r"\b20\d\d-\d\d-\d\d\b", line) and not line.startswith("|")]
    assert dated == []
    assert (ROOT / "docs" / "benchmarks-history.md").is_file()


@pytest.mark.parametrize("line", COMMANDS, ids=[line.split()[1] for line in COMMANDS])
def test_documented_options_exist(line: str):
    script = ROOT / line.split()[1]
    assert script.is_file(), line
    helped = help_text(script)
    for option in re.findall(r"(--[a-z][a-z0-9-]*)", line):
        assert option in helped, f"{script.name} --help does not list {option}"


def help_text(script: Path) -> str:
    """What ``python SCRIPT --help`` prints, run in this interpreter (a unit test starts no process,
    tests/tiers.py); the script's sibling modules it imported by bare name are forgotten afterwards."""
    saved_argv, saved_path, known = sys.argv, list(sys.path), set(sys.modules)
    out = io.StringIO()
    sys.argv = [str(script), "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        for name in set(sys.modules) - known:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(ROOT / "bench")):
                del sys.modules[name]
    assert exited.value.code in (0, None), f"{script.name} --help exited with {exited.value.code}"
    return out.getvalue()


@pytest.mark.integration  # a process per script: what a user's `python bench/X.py` gets, no PYTHONPATH
def test_every_benchmark_starts_from_a_checkout():
    """``python bench/X.py --help`` from the checkout, as the doc says, with nothing on PYTHONPATH: the
    in-process runs above have the checkout on the path already, which hid scripts that could not import
    the tests' service helpers (bench/common.py puts the checkout on the path now)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    failed = {}
    for script in sorted(SCRIPTS):
        done = subprocess.run(
            [sys.executable, script, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            failed[script] = done.stderr.strip().splitlines()[-1:]
    assert failed == {}
