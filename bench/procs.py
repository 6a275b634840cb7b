"""Benchmark server and client processes: the hub, docker-registry, a forkd user, and their logs.

Everything runs on loopback; callers stop servers with ``with`` blocks or an ``ExitStack``.
:class:`HubServer` runs ``forkd-hub serve --port P --data-dir D`` on a free port;
:class:`RegistryServer` runs Debian's ``/usr/bin/docker-registry serve config.yml`` (its default
config minus htpasswd auth, filesystem storage in a temp dir, bound to 127.0.0.1);
:class:`ForkdUser` is one machine's ``forkd`` with its own store and config dir.
"""

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
from common import ROOT

from tests.services.readiness import wait_ready


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script(name: str) -> str | None:
    """The console script installed next to this interpreter (what a venv or pipx user runs),
    not a version manager's shim found first on PATH (pyenv's costs ~0.1 s of bash per call)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


def forkd_cmd(*args: str) -> list[str]:
    exe = _script("forkd")
    return [exe, *args] if exe else [sys.executable, "-m", "forkd_client.cli.main", *args]


def forkd_hub_cmd(*args: str) -> list[str]:
    exe = _script("forkd-hub")
    return [exe, *args] if exe else [sys.executable, "-m", "hub_server.cli", *args]


def wait_http(url: str, proc: subprocess.Popen, what: str, log: Path | None = None) -> None:
    """Wait until ``url`` answers 200 (tests/services/readiness.py: a bound that grows with load and while
    the process works). Raises RuntimeError (``NotReady``) quoting the end of ``log``."""

    def answers() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_ready(answers, what=f"{what} ({url})", proc=proc, log=log, poll=0.05)


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


#: The benchmarks measure the server, not its rate limiter (docs/limits.md: 50 anonymous requests a second
#: from one address by default, which a load generator on loopback passes in a fraction of a second; the
#: peers, docker-registry and S3, have none): off unless a benchmark's ``env`` sets them.
RATE_LIMITS_OFF = {"FORKD_HUB_RATE_TOKEN": "off", "FORKD_HUB_RATE_ADDRESS": "off", "FORKD_HUB_RATE_ANONYMOUS": "off"}


class HubServer:
    """``forkd-hub serve`` on a free port with its own data dir (rate limits off: ``RATE_LIMITS_OFF``);
    ``stop()`` ends it. ``host``: the address
    it listens on (loopback by default); ``launcher``: put in front of its command line (e.g.
    ``ip netns exec NAME``, to run it in the servers' namespace of a netshape.ServerNetns); ``serve_args``: more
    options of ``serve`` (e.g. ``--mirror-of URL``)."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        launcher: Sequence[str] = (),
        serve_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.env = {**os.environ, **RATE_LIMITS_OFF, **(env or {})}
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                *launcher,
                *forkd_hub_cmd(
                    "serve", *serve_args, "--host", host, "--port", str(self.port), "--data-dir", str(data_dir)
                ),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=self.env,
        )
        try:
            wait_http(self.url + "/healthz", self.proc, "forkd-hub serve", Path(self._log.name))
        except BaseException:
            self.stop()
            raise

    def token(self, name: str, *scopes: str) -> str:
        args = ["token", "create", name, "--data-dir", str(self.data_dir)]
        for scope in scopes:
            args += ["--scope", scope]
        return subprocess.run(
            forkd_hub_cmd(*args), check=True, capture_output=True, text=True, env=self.env, timeout=60
        ).stdout.strip()

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


REGISTRY_CONFIG = """\
version: 0.1
log:
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: forkd-hub-bench
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
"""


class RegistryServer:
    """Debian's docker-registry (distribution 2.8): /etc/docker/registry/config.yml without the
    htpasswd auth (plus an http secret, to silence its start-up warning), storage under ``root``,
    on a free loopback port. ``host`` is ``127.0.0.1:P``."""

    def __init__(self, root: Path, log_path: Path) -> None:
        exe = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        if not os.path.exists(exe):
            raise RuntimeError("docker-registry is not installed: run scripts/install-bench-deps.sh")
        self.root = root
        self.storage = root / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        config = root / "config.yml"
        config.write_text(REGISTRY_CONFIG.format(root=self.storage, port=self.port))
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen([exe, "serve", str(config)], stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_http(self.url + "/v2/", self.proc, "docker-registry", Path(self._log.name))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ForkdUser:
    """One machine's ``forkd``: its own store (FORKD_HOME) and config dir, pointed at a hub URL."""

    def __init__(self, root: Path, hub_url: str, token: str | None = None, home: Path | None = None) -> None:
        self.root = root
        self.home = home or root / "home"
        self.env = {
            **os.environ,
            "FORKD_HOME": str(self.home),
            "XDG_CONFIG_HOME": str(root / "cfg"),
            "FORKD_HUB_URL": hub_url,
        }
        self.env.pop("FORKD_TOKEN", None)
        if token:
            self.run("login", hub_url, "--token-stdin", input=token + "\n")

    def run(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(
            forkd_cmd(*args), env={**self.env, **(env or {})}, capture_output=True, text=True, input=input, timeout=600
        )
        if result.returncode != 0:
            raise RuntimeError(f"forkd {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def json(self, *args: str, env: dict[str, str] | None = None) -> dict:
        return json.loads(self.run(*args, "--json", env=env))


def log_problems(path: Path) -> list[str]:
    """Warning/error lines of a hub (JSON lines) or docker-registry (logfmt) log. The registry logs
    every 404 of skopeo's blob existence checks (HEAD before upload) at level=error; those are
    expected and left out."""
    if not path.exists():
        return []
    bad = (
        '"level": "WARNING"',
        '"level": "ERROR"',
        '"level": "CRITICAL"',
        "level=warning",
        "level=error",
        "level=fatal",
        "level=panic",
        "Traceback",
    )
    expected = ('err.code="blob unknown"',)
    return [
        line.rstrip()
        for line in path.read_text(errors="replace").splitlines()
        if any(b in line for b in bad) and not any(e in line for e in expected)
    ]


def log_summary(**logs: Path) -> str:
    """``hub: 0 warnings/errors; registry: 0 …`` plus the first offending line of each, if any."""
    parts = []
    for name, path in logs.items():
        problems = log_problems(path)
        parts.append(
            f"{name} log: {len(problems)} warning/error lines" + (f" (first: {problems[0][:300]})" if problems else "")
        )
    return "; ".join(parts)
