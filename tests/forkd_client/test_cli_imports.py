"""Issue 15: ``forkd --help`` and the local commands (``fork``, ``images`` ...) load neither httpx
nor cryptography nor the push/pull machinery; only the hub commands do, when they run
(``forkd_client.cli.hub_commands`` registers their parsers and imports ``cli.hub`` lazily)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HUB_CLIENT_MODULES = (
    "httpx",
    "httpcore",
    "cryptography",
    "forkd_client.cli.hub",
    "forkd_client.hub.client",
    "forkd_client.hub.transport",
    "forkd_client.hub.push",
    "forkd_client.hub.pull",
)
#: what the ``forkd`` console script runs
CONSOLE_SCRIPT = "import sys; from forkd_client.cli.main import main; sys.exit(main())"


def imported_by(tmp_path: Path, *argv: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules ``forkd ARGV`` imports (python -X importtime, in a fresh interpreter), and its result."""
    env = {**os.environ, "FORKD_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env.pop("FORKD_HUB_URL", None)
    env.pop("FORKD_TOKEN", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    # findall, not per line: the command's own stderr lines may run into importtime's
    modules = set(re.findall(r"import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)", done.stderr))
    return modules, done


def hub_client_modules(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HUB_CLIENT_MODULES))


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("fork", "--help"), ("push", "--help"), ("images",), ("fork", "nosuch"), ("keygen", "--help")],
    ids=["help", "fork-help", "push-help", "images", "fork-missing", "keygen-help"],
)
def test_local_commands_do_not_import_the_hub_client(tmp_path, argv):
    modules, done = imported_by(tmp_path, *argv)
    assert "forkd_client.cli.main" in modules, done.stderr[-2000:]  # the probe sees the imports
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert hub_client_modules(modules) == [], f"forkd {' '.join(argv)} imported them"


def test_a_hub_command_imports_them_when_it_runs(tmp_path):
    """The control: ``forkd search`` against a closed port loads the client, then fails cleanly."""
    modules, done = imported_by(tmp_path, "search", "--hub", "http://127.0.0.1:9")
    assert {"httpx", "forkd_client.cli.hub", "forkd_client.hub.client"} <= modules
    assert done.returncode == 5, done.stderr[-2000:]  # network error, no traceback
    assert "Traceback" not in done.stderr
