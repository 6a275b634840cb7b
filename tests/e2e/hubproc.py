"""Start real ``forkd-hub serve`` processes on free ports for end-to-end tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from tests.e2e.logscan import assert_no_traceback
from tests.services.readiness import wait_ready


def forkd_hub(*args: str) -> list[str]:
    exe = shutil.which("forkd-hub")
    return [exe, *args] if exe else [sys.executable, "-m", "hub_server.cli", *args]


def forkd(*args: str) -> list[str]:
    exe = shutil.which("forkd")
    return [exe, *args] if exe else [sys.executable, "-m", "forkd_client.cli.main", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    """Whether ``url/healthz`` answers 200 now."""
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_healthy(url: str, proc: subprocess.Popen, log: Path | None = None) -> None:
    """Wait for a started ``forkd-hub serve`` to answer ``/healthz`` (tests/services/readiness.py: a bound
    that grows with load and while it works). Raises ``NotReady`` quoting the end of ``log``."""
    wait_ready(lambda: healthy(url), what=f"forkd-hub serve on {url}", proc=proc, log=log)


#: Seconds the hub lets in-flight requests finish on SIGTERM (hub_server/cli.py, timeout_graceful_shutdown).
GRACEFUL_STOP = 30


class HubProcess:
    """A running hub: ``url``, ``data_dir``, ``token(name, *scopes)``, ``stop()``."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """Start ``forkd-hub serve`` (on ``port``, else a free one, with ``args`` added) and wait for /healthz.
        The log is appended to, so a replica restarted on the same data keeps one log."""
        self.data_dir = data_dir
        self.env = {**os.environ, "FORKD_HUB_DATA_DIR": str(data_dir), **(env or {})}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log_path.open("a")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(
            forkd_hub("serve", "--port", str(self.port), *args),
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_healthy(self.url, self.proc, log_path)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            self._log.close()
            raise

    def token(self, name: str, *scopes: str) -> str:
        args = ["token", "create", name]
        for scope in scopes:
            args += ["--scope", scope]
        return subprocess.run(
            forkd_hub(*args), env=self.env, check=True, capture_output=True, text=True, timeout=60
        ).stdout.strip()

    def requests(self) -> list[tuple[str, str, int]]:
        """``(method, path, status)`` of every request the hub's access log recorded so far, in order."""
        out = []
        for line in Path(self._log.name).read_text(errors="replace").splitlines():
            if '"hub_server.access"' in line:
                entry = json.loads(line)
                out.append((entry["method"], entry["path"], entry["status"]))
        return out

    def kill(self) -> None:
        """SIGKILL the hub (a crash: nothing it holds is given back)."""
        self.proc.kill()
        self.proc.wait(timeout=30)
        self._log.close()

    def log(self) -> str:
        """What this process wrote to its log."""
        with open(self._log.name, errors="replace") as f:
            f.seek(self._log_start)
            return f.read()

    def stop(self) -> int:
        """SIGTERM the hub and return its exit status; its log must hold no traceback.

        The hub lets in-flight requests finish for up to 30 s (``timeout_graceful_shutdown``) before it closes
        its database and store: wait that plus the time a loaded machine needs to close them."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=GRACEFUL_STOP + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            self._log.close()
        assert_no_traceback(self.log(), f"hub log {self._log.name}")
        return code
