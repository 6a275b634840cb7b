"""Connecting to a VMM's Unix socket, even when its path is too long for ``sun_path``.

pytest temp dirs easily exceed the 107-byte ``sun_path`` limit, so long paths are reached through
``/proc/self/fd/<dirfd>/<name>``, which the kernel resolves like the real path.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

_SUN_PATH_MAX = 107


def connect_unix(path: Path, timeout: float, alive: Callable[[], bool] = lambda: True) -> socket.socket:
    """Connect to the stream socket at ``path``, retrying until it exists and accepts.

    Raises ``TimeoutError`` after ``timeout`` seconds, ``ConnectionError`` as soon as ``alive()``
    turns false (the server process died, so waiting longer is pointless).
    """
    deadline = time.monotonic() + timeout
    last_error: OSError | None = None
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _connect_long(sock, Path(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            last_error = exc
        except BaseException:
            sock.close()
            raise
        if not alive():
            raise ConnectionError(f"server for {path} exited before accepting connections")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no server on {path} after {timeout:.1f}s ({last_error})")
        time.sleep(0.01)


def _connect_long(sock: socket.socket, path: Path) -> None:
    if len(os.fsencode(str(path))) <= _SUN_PATH_MAX:
        sock.connect(str(path))
        return
    dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.connect(f"/proc/self/fd/{dir_fd}/{path.name}")
    finally:
        os.close(dir_fd)
