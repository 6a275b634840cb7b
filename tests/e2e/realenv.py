"""What the real-environment tests share: the Debian python userland they bake (built once into a cache
kept across runs), and a one-wheel package index on the host's loopback for ``--net``."""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import socketserver
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forkd_client.images import DebianSpec
from forkd_client.images.cache import CACHE_ENV

#: the userland: python3 with numpy and pip, Debian 12
SPEC = DebianSpec("bookworm", ("python3", "python3-numpy", "python3-pip"))
INCLUDE = ",".join(SPEC.packages)


def shared_rootfs_cache() -> Path:
    """Where tests keep built root filesystems across runs (keyed by their inputs)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "forkd" / "test-rootfs"


@contextmanager
def rootfs_cache_env() -> Iterator[Path]:
    """Export the test rootfs cache (``FORKD_ROOTFS_CACHE``) so CLI runs build into it too."""
    cache = shared_rootfs_cache()
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(cache)
    try:
        yield cache
    finally:
        if saved is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = saved


def write_wheel(path: Path, package: str, source: str) -> None:
    """A minimal pure-Python wheel (PEP 427) with a RECORD pip accepts."""
    dist = f"{package}-1.0.dist-info"
    files = {
        f"{package}/__init__.py": source.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: forkd-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)


@contextmanager
def wheel_index(directory: Path, package: str, source: str) -> Iterator[int]:
    """A package index serving one wheel on the host's loopback; yields its port (the guest reaches it as
    ``http://10.0.2.2:PORT/``)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_wheel(directory / f"{package}-1.0-py3-none-any.whl", package, source)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, *args: object) -> None:
            pass

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()


def pip_install(port: int, package: str) -> str:
    """The guest command that installs ``package`` from the loopback index (Debian's python is externally
    managed, PEP 668: in a throwaway VM image that is what --break-system-packages is for)."""
    return (
        "pip install --break-system-packages --no-index --trusted-host 10.0.2.2 "
        f"--find-links http://10.0.2.2:{port}/ {package}"
    )
