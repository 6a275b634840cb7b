"""The import rules of docs/architecture.md hold (import-linter contracts in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports")
    cmd = [exe] if exe else [sys.executable, "-m", "importlinter.cli"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: " in result.stdout and " broken" in result.stdout
    assert "0 broken" in result.stdout


def test_architecture_doc_names_every_package():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for package in ("manifest", "vmm", "forkd_client", "hub_server", "web"):
        assert f"`{package}`" in text, package
