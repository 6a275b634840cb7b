"""The reference load balancer for tests: Debian's ``haproxy`` running ``deploy/haproxy.cfg`` unchanged, with TLS.

The certificate is made the way docs/deployment.md says (``openssl req -x509 …``, a self-signed certificate for
``127.0.0.1``), so the documented command is what the tests run; clients trust it through ``SSL_CERT_FILE``
(:attr:`LoadBalancer.ca_file`, which httpx and the ``forkd`` client honour). HAProxy is started in the
foreground (``-db``) on 127.0.0.1, with the replicas' addresses in the variables the config names, and dies
with the test process.

Errors: :class:`LoadBalancerUnavailable` when ``haproxy`` or ``openssl`` is missing or it does not start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
from pathlib import Path

from tests.services.ports import free_port
from tests.services.readiness import NotReady, wait_ready

__all__ = ["CONFIG", "LoadBalancer", "LoadBalancerUnavailable", "make_certificate"]

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"


class LoadBalancerUnavailable(RuntimeError):
    """``haproxy`` (or ``openssl``) is not installed, or it did not start (the message has its log's tail)."""


def _die_with_parent() -> None:
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def make_certificate(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``host``, made with docs/deployment.md's command; returns (PEM with
    certificate and key for HAProxy, the certificate alone for clients). Raises LoadBalancerUnavailable."""
    if shutil.which("openssl") is None:
        raise LoadBalancerUnavailable("openssl is not installed (apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / "hub.key", directory / "hub.crt"
    argv = (
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 30 -nodes "
        f"-subj /CN={host} -addext subjectAltName=IP:{host},DNS:localhost -keyout {key} -out {cert}"
    ).split()
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise LoadBalancerUnavailable(f"openssl req failed: {done.stderr.strip()[-1000:]}")
    pem = directory / "hub.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    pem.chmod(0o600)
    return pem, cert


class LoadBalancer:
    """HAProxy with TLS in front of ``replicas`` (``host:port`` each, two as deploy/haproxy.cfg names):
    ``url`` (https), ``ca_file``, ``env`` (for clients), ``stop()``."""

    def __init__(self, root: Path, replicas: list[str]) -> None:
        if shutil.which("haproxy") is None:
            raise LoadBalancerUnavailable("haproxy is not installed (scripts/install-system-deps.sh)")
        if len(replicas) != 2:
            raise ValueError("deploy/haproxy.cfg names two replicas")
        self.root = root
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.pem, self.ca_file = make_certificate(root / "tls")
        self.log_path = root / "haproxy.log"
        self._env = {
            **os.environ,
            "FORKD_LB_BIND": f"127.0.0.1:{self.port}",
            "FORKD_LB_CERT": str(self.pem),
            "FORKD_HUB_REPLICA1": replicas[0],
            "FORKD_HUB_REPLICA2": replicas[1],
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a client of the load balancer sets: its CA, its URL."""
        return {"SSL_CERT_FILE": str(self.ca_file), "FORKD_HUB_URL": self.url}

    def start(self) -> None:
        """Check the config, start HAProxy and wait until it completes a TLS handshake. Raises LoadBalancerUnavailable."""
        checked = subprocess.run(
            ["haproxy", "-c", "-f", str(CONFIG)], env=self._env, capture_output=True, text=True, timeout=60, check=False
        )
        if checked.returncode != 0:
            raise LoadBalancerUnavailable(f"haproxy -c {CONFIG}: {checked.stdout[-1500:]} {checked.stderr[-1500:]}")
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(CONFIG)],
            env=self._env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        try:
            wait_ready(self._handshakes, what=f"haproxy on {self.url}", proc=self.proc, log=self.log_path)
        except NotReady as exc:
            self.stop()
            raise LoadBalancerUnavailable(str(exc)) from exc

    def _handshakes(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return True
        except OSError:
            return False

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)  # soft stop: finish what is in flight
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
