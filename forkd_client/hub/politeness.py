"""Waiting out a busy hub: a ``429 Too Many Requests`` is retried after the ``Retry-After`` it names.

The hub limits requests per token and per client address (docs/limits.md) and answers ``429`` with
``Retry-After`` (seconds). :class:`Patience` decides, per request, whether to wait and how long: the
hub's ``Retry-After`` (1 s when absent or unreadable, never more than :data:`MAX_WAIT`), at most
:data:`MAX_RETRIES` times and :data:`MAX_TOTAL_WAIT` seconds in all; then the 429 is the request's
answer (the caller raises the hub's error from its envelope). Every wait is said on stderr, once a
wait, so a CI log shows why a push paused. Only requests whose body can be sent again are retried
(no body, or bytes); a streamed body is not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_RETRIES", "MAX_TOTAL_WAIT", "MAX_WAIT", "Patience", "retry_after"]

MAX_RETRIES = 5
MAX_WAIT = 60.0
MAX_TOTAL_WAIT = 120.0


def retry_after(value: str | None) -> float:
    """Seconds from a ``Retry-After`` header (delta-seconds; an HTTP date or junk counts as 1 s), ≤ MAX_WAIT."""
    try:
        seconds = float(value) if value is not None else 1.0
    except ValueError:
        seconds = 1.0
    if not seconds >= 0.0:  # NaN too
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_WAIT)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Patience:
    """How a client waits out 429s; ``sleep`` and ``say`` are injectable (tests)."""

    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = _say

    def wait(self, attempt: int, header: str | None, what: str, waited: float) -> float | None:
        """After the ``attempt``-th 429 (1-based) of ``what``, having waited ``waited`` seconds for it so far:
        wait and return the seconds waited, or None to give up."""
        delay = retry_after(header)
        if attempt > MAX_RETRIES or waited + delay > MAX_TOTAL_WAIT:
            return None
        self.say(
            f"forkd: the hub is limiting requests (429) on {what}; waiting {delay:g} s as it asks "
            f"(retry {attempt} of {MAX_RETRIES})"
        )
        self.sleep(delay)
        return delay
