"""Every JSON example in docs/cli.md parses and has exactly the keys the real command prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forkd_client.cli.main import main

from .snapshots import make_base_source, make_link_source

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
EXAMPLE = re.compile(r"<!-- json-example: (\w+) -->\s*```json\n(.*?)```", re.S)


def examples() -> dict[str, object]:
    found = {name: json.loads(body) for name, body in EXAMPLE.findall(DOC.read_text())}
    # push/pull/inspect_remote: tests/forkd_client/hub/test_cli_docs_hub.py
    assert set(found) == {"images", "inspect", "push", "pull", "inspect_remote"}
    return found


def real_output(capsys, *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def two_links(home: Path, tmp_path: Path, capsys) -> None:
    base = make_base_source(tmp_path / "b")
    make_link_source(tmp_path / "l", base / "memory.bin", seed=2)
    assert main(["import", str(base), "py-base"]) == 0
    assert main(["import", str(tmp_path / "l"), "py-numpy", "--parent", "py-base"]) == 0
    capsys.readouterr()


def test_images_example_matches(two_links, capsys) -> None:
    doc = examples()["images"]
    real = real_output(capsys, "images", "--json")
    assert isinstance(doc, list) and [set(i) for i in doc] == [set(i) for i in real]
    assert [(i["tag"], i["parent_tag"], i["depth"]) for i in doc] == [
        (i["tag"], i["parent_tag"], i["depth"]) for i in real
    ]


def test_inspect_example_matches(two_links, capsys) -> None:
    doc = examples()["inspect"]
    real = real_output(capsys, "inspect", "py-numpy", "--json", "--verify")
    assert isinstance(doc, dict) and set(doc) == set(real)
    assert set(doc["files"]["memory.bin"]) == set(real["files"]["memory.bin"])
