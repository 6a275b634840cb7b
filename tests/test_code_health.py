"""The mechanical gates of docs/decisions/0008-code-health-gates.md hold on the whole tree.

ruff (lint) and mypy run with the configuration in pyproject.toml, the same way a developer runs
them (`ruff check .`, `mypy`), so a failure here is reproduced by copying the command.
"""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which(tool)
    cmd = [exe, *args] if exe else [sys.executable, "-m", tool, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean() -> None:
    result = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
