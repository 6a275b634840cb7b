"""docs/benchmarks.md stays runnable: every command it gives names a script in bench/ that
accepts every option the line mentions (in the command or its comment)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [
    line for line in (ROOT / "docs" / "benchmarks.md").read_text().splitlines() if line.startswith("python bench/")
]


def test_the_doc_gives_a_command_for_every_benchmark():
    scripts = {line.split()[1] for line in COMMANDS}
    on_disk = {
        f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__":' in p.read_text()
    }  # the scripts, not their shared modules
    assert scripts == on_disk


@pytest.mark.parametrize("line", COMMANDS, ids=[line.split()[1] for line in COMMANDS])
def test_documented_options_exist(line: str):
    script = ROOT / line.split()[1]
    assert script.is_file(), line
    helped = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr
    for option in re.findall(r"(--[a-z][a-z0-9-]*)", line):
        assert option in helped.stdout, f"{script.name} --help does not list {option}"
