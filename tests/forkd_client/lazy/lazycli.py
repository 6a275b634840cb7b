"""What the lazy-fork end-to-end tests share: a user's environment against a real hub process,
the forkd CLI run as a process, and waiting for detached processes."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.logscan import assert_no_traceback


def user_env(root: Path, hub: HubProcess) -> dict[str, str]:
    """A user of ``hub`` with a store and config of their own under ``root``."""
    return {
        **os.environ,
        "FORKD_HOME": str(root / "home"),
        "XDG_CONFIG_HOME": str(root / "cfg"),
        "FORKD_HUB_URL": hub.url,
    }


def run_forkd(env: dict[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """``forkd ARGS`` as a process; never a traceback, whatever it exits with."""
    result = subprocess.run(forkd(*args), env=env, capture_output=True, text=True, input=input, timeout=600)
    assert_no_traceback(result.stdout + result.stderr, f"forkd {' '.join(args)}")
    return result


def login(env: dict[str, str], hub: HubProcess, name: str, scope: str) -> None:
    """Log the user of ``env`` in to ``hub`` with a new token ``name`` of ``scope``."""
    token = hub.token(name, scope)
    assert run_forkd(env, "login", hub.url, "--token-stdin", input=token + "\n").returncode == 0


def wait_until(condition: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
