"""Waiting for a process the tests started to be ready: a generous bound that grows with load and while the
process works, and the process's own output when it never gets there.

:func:`wait_ready` polls ``ready()`` until it answers True. The bound starts at ``base`` seconds (120) times the
machine's load per core when that is above 1 (a hub that starts in 3 s on a quiet machine took over 30 s on a
loaded one). Past the bound the wait goes on as long as the process is alive and making progress (its CPU time
or its log grew during the last ``grace`` seconds), up to ``limit`` seconds in all: a slow start is waited for,
a stuck one is not waited for forever.

Errors: :class:`NotReady` when the process exits, stops making progress past the bound, or reaches the limit;
its message names the process, says which, and ends with the tail of the process's log.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["NotReady", "cpu_seconds", "log_tail", "wait_ready"]

BASE = 120.0
GRACE = 30.0
LIMIT = 600.0
_TICKS = os.sysconf("SC_CLK_TCK")


class NotReady(RuntimeError):
    """A started process did not become ready (the message carries its log's tail)."""


def cpu_seconds(pid: int) -> float | None:
    """CPU time ``pid`` and its reaped children have used, or None if there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(f) for f in fields[11:15]) / _TICKS  # utime stime cutime cstime


def log_tail(path: Path | None, limit: int = 3000) -> str:
    """The last ``limit`` characters of a log file ('' if there is none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _load_factor() -> float:
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def wait_ready(
    ready: Callable[[], bool],
    *,
    what: str,
    proc: subprocess.Popen | None = None,
    pids: Callable[[], list[int]] | None = None,
    log: Path | None = None,
    base: float = BASE,
    grace: float = GRACE,
    limit: float = LIMIT,
    poll: float = 0.1,
) -> float:
    """Poll ``ready()`` until True; return the seconds it took.

    ``proc``: the started process (its exit ends the wait); ``pids``: the processes whose CPU time counts as
    progress (default: ``proc``'s; a daemon that detaches names its own); ``log``: the file its output goes to,
    whose growth counts as progress too and whose tail the error quotes. Raises :class:`NotReady`.
    """
    started = time.monotonic()
    deadline = started + base * _load_factor()
    watched = pids or ((lambda: [proc.pid]) if proc is not None else (list))
    mark = _progress(watched(), log)
    checked = time.monotonic()
    while True:
        if proc is not None and proc.poll() is not None:
            raise _not_ready(what, f"exited with status {proc.returncode}", log)
        if ready():
            return time.monotonic() - started
        now = time.monotonic()
        if now - started > limit:
            raise _not_ready(what, f"was not ready after {limit:.0f} s", log)
        if now > deadline and now - checked >= grace:
            progress = _progress(watched(), log)
            if progress == mark:
                raise _not_ready(
                    what, f"was not ready after {now - started:.0f} s and made no progress in {grace:.0f} s", log
                )
            mark, checked = progress, now
        time.sleep(poll)


def _progress(pids: list[int], log: Path | None) -> tuple[float, int]:
    cpu = sum(c for c in (cpu_seconds(pid) for pid in pids) if c is not None)
    try:
        size = os.path.getsize(log) if log is not None else 0
    except OSError:
        size = 0
    return cpu, size


def _not_ready(what: str, why: str, log: Path | None) -> NotReady:
    tail = log_tail(log).strip()
    return NotReady(
        f"{what} {why}" + (f"; the end of {log}:\n{tail}" if tail else f" (its log {log} is empty)" if log else "")
    )
