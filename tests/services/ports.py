"""Free TCP ports on 127.0.0.1."""

from __future__ import annotations

import random
import socket

__all__ = ["free_port", "port_is_free"]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(below: int = 65536, also_free: tuple[int, ...] = ()) -> int:
    """A port the kernel just handed out, under ``below``, with ``port + offset`` free for each offset.

    Raises: RuntimeError after many attempts (the ephemeral range is exhausted or above ``below``).
    """
    for _ in range(500):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below and all(port + offset < 65536 and port_is_free(port + offset) for offset in also_free):
            return port
    start = random.randrange(20000, below - 2000)  # the ephemeral range lies above ``below``: probe below it
    for port in range(start, below):
        if port_is_free(port) and all(port_is_free(port + offset) for offset in also_free):
            return port
    raise RuntimeError(f"no free port below {below}")
