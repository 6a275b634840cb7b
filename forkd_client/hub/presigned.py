"""Fetching ranges from presigned object-store URLs (a hub on S3 answers blob GETs with 307).

Object stores serve one range per GET, so :func:`merge_spans` groups a batch of ranges into GETs
(neighbours closer than ``gap`` merged, each GET at most ``max_span`` bytes) and
:func:`slice_spans` cuts the answers back into the ranges asked for. :class:`PresignedCache`
remembers a blob's URL for half the lifetime the URL states (``X-Amz-Expires``), at most two
minutes, so later batches of the same blob skip the hub. The URLs carry their own signature:
the client never sends its hub token with them (``HubClient._request`` drops it).

A recipe blob (format v2 data, frames stored in packs) has no object of its own: the hub answers
with a fetch plan instead (:func:`parse_plan` checks it, :func:`read_plan` fetches the pack ranges
it lists straight from the store, coalesced and in parallel).

Errors: HubError for a malformed plan (whatever ``get`` raises for a failed fetch).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from .errors import HubError

__all__ = ["MAX_REUSE_SECONDS", "BlobPlan", "PresignedCache", "merge_spans", "parse_plan", "read_plan", "slice_spans"]

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


def slice_spans(
    batch: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]], bodies: Sequence[memoryview]
) -> list[memoryview]:
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


@dataclass(frozen=True)
class BlobPlan:
    """A hub's fetch plan for ranges of a recipe blob (docs/http-api.md, "Fetch plans"): the blob's
    bytes ``[offset, offset + length)`` are ``sources[source]``'s bytes at ``source_offset``."""

    sources: tuple[str, ...]
    segments: tuple[tuple[int, int, int, int], ...]  # (offset, length, source, source_offset), sorted


def _whole(value: object, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def parse_plan(obj: object, digest: str, batch: Sequence[tuple[int, int]]) -> BlobPlan:
    """Check a fetch plan answering ``batch`` (``(offset, length)`` ranges) of blob ``digest``: sources
    are http(s) URLs, segments sorted, disjoint, pointing at a source, and covering every range.

    Raises: HubError naming what is wrong (a broken or hostile hub); the chunks are verified anyway.
    """
    where = f"blob {digest}: the hub's fetch plan"
    if not isinstance(obj, dict) or obj.get("digest") != digest:
        raise HubError(f"{where} is not a plan for this blob")
    sources, segments = obj.get("sources"), obj.get("segments")
    if not isinstance(sources, list) or not all(
        isinstance(u, str) and urlsplit(u).scheme in ("http", "https") and urlsplit(u).netloc for u in sources
    ):
        raise HubError(f"{where} has sources that are not http(s) URLs")
    if not isinstance(segments, list):
        raise HubError(f"{where} has no segment list")
    out: list[tuple[int, int, int, int]] = []
    for seg in segments:
        if not (
            isinstance(seg, list)
            and len(seg) == 4
            and _whole(seg[0])
            and _whole(seg[1], 1)
            and _whole(seg[2])
            and seg[2] < len(sources)
            and _whole(seg[3])
        ):
            raise HubError(f"{where} has a malformed segment {str(seg)[:80]}")
        if out and seg[0] < out[-1][0] + out[-1][1]:
            raise HubError(f"{where} has overlapping or unsorted segments")
        out.append((seg[0], seg[1], seg[2], seg[3]))
    plan = BlobPlan(tuple(sources), tuple(out))
    starts = [s[0] for s in out]
    for offset, size in batch:
        pos, end = offset, offset + size
        i = bisect.bisect_right(starts, pos) - 1
        while pos < end:
            if i < 0 or i >= len(out) or not out[i][0] <= pos < out[i][0] + out[i][1]:
                raise HubError(f"{where} does not cover bytes {pos}-{end - 1}")
            pos = out[i][0] + out[i][1]
            i += 1
    return plan


def read_plan(
    plan: BlobPlan,
    batch: Sequence[tuple[int, int]],
    gap: int,
    max_span: int,
    get: Callable[[str, int, int], memoryview],
    parallel: int,
) -> list[memoryview]:
    """The bytes of each range of ``batch`` (in its order), fetched as ``plan`` says: only the parts of
    segments the ranges cover, per source merged (``merge_spans``) into GETs ``get(url, start, end)``,
    ``parallel`` at a time. A range inside one segment is a view (no copy); one across segments is joined."""
    starts = [s[0] for s in plan.segments]
    wanted: list[list[tuple[int, int, int]]] = []  # per range: (source, source offset, length) parts
    for offset, size in batch:
        i = bisect.bisect_right(starts, offset) - 1
        parts, pos, end = [], offset, offset + size
        while pos < end:  # parse_plan checked that the segments cover the range
            seg_offset, seg_length, source, at = plan.segments[i]
            take = min(end, seg_offset + seg_length) - pos
            parts.append((source, at + pos - seg_offset, take))
            pos += take
            i += 1
        wanted.append(parts)
    per_source: dict[int, list[tuple[int, int]]] = {}
    for parts in wanted:
        for source, at, length in parts:
            per_source.setdefault(source, []).append((at, length))
    jobs = [(source, span) for source, pieces in per_source.items() for span in merge_spans(pieces, gap, max_span)]
    if len(jobs) == 1:  # the common case of a piece inside one pack: no thread to start
        bodies = [get(plan.sources[jobs[0][0]], *jobs[0][1])]
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(jobs)))) as pool:
            bodies = list(pool.map(lambda job: get(plan.sources[job[0]], *job[1]), jobs))
    by_source: dict[int, tuple[list[tuple[int, int]], list[memoryview]]] = {}
    for (source, span), body in zip(jobs, bodies, strict=True):
        by_source.setdefault(source, ([], []))[0].append(span)
        by_source[source][1].append(body)
    out: list[memoryview] = []
    for parts in wanted:
        views = [slice_spans([(at, length)], *by_source[source])[0] for source, at, length in parts]
        out.append(views[0] if len(views) == 1 else memoryview(b"".join(views)))
    return out
