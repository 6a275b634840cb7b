"""docs/benchmarks.md stays runnable: every command it gives names a script in bench/ that
accepts every option the line mentions (in the command or its comment)."""

from __future__ import annotations

import contextlib
import io
import re
import runpy
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
