"""Shape the loopback interface like a real network link, for the length of a ``with`` block.

The hub, the registry and their clients all talk over ``lo``, where bytes are almost free;
real pulls cross a network. ``shaped_loopback(1000)`` puts a token-bucket filter (``tc qdisc
… tbf``) on ``lo``'s egress, so every byte on loopback, whichever direction, shares one
1 Gbit/s link. Needs root and ``tc`` (iproute2); refuses to touch a ``lo`` that already has a
qdisc of its own, and always removes its own on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator


def _tc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def shaped_loopback(mbit: int) -> Iterator[str | None]:
    """Yield None while ``lo`` is limited to ``mbit`` Mbit/s, or the reason it could not be."""
    if os.geteuid() != 0:
        yield "not root (tc needs root)"
        return
    if shutil.which("tc") is None:
        yield "tc missing (iproute2)"
        return
    current = _tc("qdisc", "show", "dev", "lo").stdout
    if not current.startswith("qdisc noqueue"):
        yield f"lo already has a qdisc ({current.strip()[:80]}); not touching it"
        return
    # burst: at least rate / HZ and a few 64 KiB loopback packets; latency bounds the queue
    added = _tc("qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{mbit}mbit", "burst", "1mb", "latency", "50ms")
    if added.returncode != 0:
        yield f"tc could not add a tbf qdisc: {added.stderr.strip()}"
        return
    try:
        yield None
    finally:
        _tc("qdisc", "del", "dev", "lo", "root")
