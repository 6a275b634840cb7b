"""Riding out what interrupts a transfer for a while: a hub outage, a replica that died, a busy upload session.

A failure is **transient** when retrying later may work (:func:`transient`): no answer at all
(``HubUnreachable``: refused, reset, timed out), a 502/503/504 (a load balancer without a healthy replica,
or the hub's own ``UNAVAILABLE``: its database or store is out), or ``UploadBusy`` (another request holds
the upload session: the hub says for how long). A :class:`Retrier` repeats a step on transient failures,
waiting the hub's ``Retry-After`` when it gave one (else 0.5 s, doubling up to 10 s), for as long as the
step keeps making **progress**: the window (``FORKD_RETRY_FOR``, 60 s by default; 0 turns retries off)
counts seconds without progress, and it starts again whenever the hub committed more (the caller's
``progress()`` measure grew) or answered "busy" (a live request is working on it). Only steps that are
safe to repeat are retried: reads, a manifest PUT, frame queries, and whole blob uploads, which resume
from the offset the hub committed (``blobupload.py``).

Timeouts are the other half (:func:`http_timeout`): one request waits at most ``FORKD_TIMEOUT`` seconds
(default 120) **without a byte moving** — httpx's read and write timeouts apply to each read and write, so
a long transfer that keeps moving never times out — and ``FORKD_CONNECT_TIMEOUT`` (default 10) to connect.
A hub that works longer than that without answering (verifying a large upload) is not given up on: the
timeout is transient, the time the timed-out request waited does not count against the window (so a
timeout longer than the window is still retried once), and the upload's retry finds its work done or still
going (busy) and waits. A hub that never answers is given up on after its second timeout.

Errors: what the step raises, once it is not transient or the window passed; HubError for a malformed
variable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .errors import GATEWAY_STATUSES, HubError, HubUnreachable, UploadBusy

__all__ = ["RETRY_FOR", "Retrier", "connect_timeout", "http_timeout", "retry_window", "transient"]

T = TypeVar("T")

RETRY_FOR = 60.0
TIMEOUT = 120.0
CONNECT_TIMEOUT = 10.0
FIRST_DELAY = 0.5
MAX_DELAY = 10.0


def _seconds(variable: str, default: float, *, minimum: float) -> float:
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < minimum:
        raise HubError(f"{variable}={raw!r} is not a number of seconds (at least {minimum:g})")
    return value


def retry_window() -> float:
    """``FORKD_RETRY_FOR``: seconds a step is retried without progress (0: never retried)."""
    return _seconds("FORKD_RETRY_FOR", RETRY_FOR, minimum=0)


def http_timeout() -> float:
    """``FORKD_TIMEOUT``: seconds one request may wait without a byte moving either way."""
    return _seconds("FORKD_TIMEOUT", TIMEOUT, minimum=1)


def connect_timeout() -> float:
    """``FORKD_CONNECT_TIMEOUT``: seconds to open a connection to the hub."""
    return _seconds("FORKD_CONNECT_TIMEOUT", CONNECT_TIMEOUT, minimum=1)


def transient(error: BaseException) -> bool:
    """Whether retrying later may succeed (see the module docstring)."""
    if isinstance(error, HubUnreachable | UploadBusy):
        return True
    return isinstance(error, HubError) and error.status in GATEWAY_STATUSES


def _why(error: HubError) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text if len(text) <= 200 else text[:199] + "…"


@dataclass
class Retrier:
    """Repeats steps on transient failures while they progress (see the module docstring)."""

    window: float = field(default_factory=retry_window)
    notice: Callable[[str], None] | None = None
    """Told one line before each wait (the CLI prints it on stderr)."""
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def run(self, what: str, step: Callable[[], T], progress: Callable[[], int] | None = None) -> T:
        """``step()``, repeated after transient failures until ``window`` seconds pass without progress
        (``progress()`` growing, or the hub answering busy). Raises what the last attempt raised."""
        since = self.clock()
        delay = FIRST_DELAY
        longest = 0.0  # the longest failed attempt since the last progress: a timed-out request's own wait
        mark = progress() if progress is not None else 0
        while True:
            started = self.clock()
            try:
                return step()
            except HubError as error:
                if not transient(error) or self.window <= 0:
                    raise
                now = progress() if progress is not None else 0
                if now > mark or isinstance(error, UploadBusy):
                    since, delay, mark, longest = self.clock(), FIRST_DELAY, now, 0.0
                else:
                    longest = max(longest, self.clock() - started)
                wait = error.retry_after if error.retry_after is not None else delay
                if self.clock() - since + wait > self.window + longest:
                    raise
                if self.notice is not None:
                    self.notice(f"{what}: {_why(error)}; retrying in {wait:.1f} s")
                self.sleep(wait)
                delay = min(delay * 2, MAX_DELAY)
