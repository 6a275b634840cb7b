"""Fetching ranges from presigned object-store URLs (a hub on S3 answers blob GETs with 307).

Object stores serve one range per GET, so :func:`merge_spans` groups a batch of ranges into GETs
(neighbours closer than ``gap`` merged, each GET at most ``max_span`` bytes) and
:func:`slice_spans` cuts the answers back into the ranges asked for. :class:`PresignedCache`
remembers a blob's URL for half the lifetime the URL states (``X-Amz-Expires``), at most two
minutes, so later batches of the same blob skip the hub. The URLs carry their own signature:
the client never sends its hub token with them (``HubClient._request`` drops it).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs, urlsplit

__all__ = ["MAX_REUSE_SECONDS", "PresignedCache", "merge_spans", "slice_spans"]

MAX_REUSE_SECONDS = 120.0


def merge_spans(batch: Sequence[tuple[int, int]], gap: int, max_span: int) -> list[tuple[int, int]]:
    """``(start, end)`` byte spans (end exclusive) covering every ``(offset, length)`` of ``batch``, sorted."""
    spans: list[list[int]] = []
    for offset, size in sorted(batch):
        if spans and offset - spans[-1][1] <= gap and offset + size - spans[-1][0] <= max_span:
            spans[-1][1] = max(spans[-1][1], offset + size)
        else:
            spans.append([offset, offset + size])
    return [(start, end) for start, end in spans]


def slice_spans(batch: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
                bodies: Sequence[memoryview]) -> list[memoryview]:
    """The bytes of each range of ``batch`` (in its order), cut out of the span ``bodies``."""
    starts = [start for start, _ in spans]
    out = []
    for offset, size in batch:
        i = bisect.bisect_right(starts, offset) - 1
        out.append(bodies[i][offset - starts[i] : offset - starts[i] + size])
    return out


class PresignedCache:
    """Presigned URLs by ``(repository, digest)``, each until half its stated lifetime (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._urls: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def get(self, name: str, digest: str) -> str | None:
        with self._lock:
            url, until = self._urls.get((name, digest), (None, 0.0))
        return url if url is not None and self._clock() < until else None

    def remember(self, name: str, digest: str, url: str) -> None:
        """Keep ``url`` if it states its lifetime (``X-Amz-Expires``); otherwise do not reuse it."""
        expires = parse_qs(urlsplit(url).query).get("X-Amz-Expires", [""])[0]
        if expires.isdigit():
            with self._lock:
                self._urls[(name, digest)] = (url, self._clock() + min(int(expires) / 2, MAX_REUSE_SECONDS))

    def forget(self, name: str, digest: str) -> None:
        with self._lock:
            self._urls.pop((name, digest), None)
