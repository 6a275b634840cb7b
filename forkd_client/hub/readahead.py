"""Later links' changed chunks fetched and verified into memory while an earlier link fills.

A pull fills its links one after the other (each link's file starts from its parent's), so at
every link boundary the wire idled: the next link's first fetch plan and store bytes were asked
for only once the previous link's fill had returned, and a small link (a few MiB of changed
chunks) is little more than that latency. Over a real network that idle time was most of what a
redirected pull took beyond raw GETs of the same objects (docs/benchmarks.md, S3, session 7).
:class:`ReadAhead` fetches the changed chunks of the links after the one filling, on threads of
its own, decompresses and verifies every frame against its chunk digest, and holds the chunks in
memory until that link's fill (:func:`.fill.fill_link`) writes them; the wire stays busy across
the boundary.

What it holds is bounded (FORKD_PULL_AHEAD_BYTES, decompressed chunk bytes; a link that does not
fit is not read ahead, and its fill fetches it as before). A link whose staged files resume an
interrupted pull is never read ahead (its completed chunks are not sent again), and chunks the
local chunk index knows are left to the fill, which reads them locally. Nothing read ahead is
trusted unverified, and nothing of it reaches a file before its link's fill writes it.

Errors: none of its own. A read-ahead that failed (a corrupt frame, a refusal, a network error)
is dropped: its link's fill fetches those chunks itself and raises what the fetch raises then,
with the fill's own messages and resume semantics.
"""

from __future__ import annotations

import bisect
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from manifest.assemble import decompress_chunk
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.model import ChunkMap

from .client import HubClient
from .errors import HubError

__all__ = ["AHEAD_BYTES", "ReadAhead", "frames_to_fetch"]

AHEAD_BYTES = 64 << 20  # decompressed chunk bytes held for later links

#: per data blob: frame offset -> (frame length, chunk digest, chunk length)
Frames = dict[str, dict[int, tuple[int, str, int]]]


def frames_to_fetch(maps: dict[str, ChunkMap], local: set[str]) -> Frames:
    """The frames holding a link's changed data chunks, except those whose digest is in ``local``
    (each frame once, however many places of the link it fills)."""
    frames: Frames = {}
    for chunk_map in maps.values():
        for e in chunk_map.entries:
            digest = e.digest
            if e.is_zero or digest is None or digest in local or e.blob is None:
                continue
            length = min(chunk_map.chunk_size, chunk_map.size - e.index * chunk_map.chunk_size)
            frames.setdefault(chunk_map.blobs[e.blob], {})[e.offset] = (e.length, digest, length)
    return frames


class ReadAhead:
    """Changed chunks of later links, fetched and verified into memory on ``parallel`` threads.

    :meth:`start` a link (when it fits the budget), :meth:`take` its chunks at its fill (waiting
    for them), :meth:`close` when the pull is done. Thread-safe; raises nothing of its own."""

    def __init__(self, client: HubClient, parallel: int, budget: int, max_range: int) -> None:
        self.client, self.budget, self.max_range = client, budget, max_range
        self.held = 0  # bytes of links started and not taken yet
        self._links: dict[str, tuple[int, list[Future[dict[str, bytes]]]]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="forkd-ahead")

    def start(self, name: str, layer: str, frames: Frames) -> bool:
        """Begin fetching ``frames`` of ``layer`` (in repository ``name``) unless they would take
        the bytes held over the budget; whether it was started."""
        from .fill import coalesce  # fill imports nothing of this module; the cycle is one-sided

        size = sum(f[2] for by_offset in frames.values() for f in by_offset.values())
        with self._lock:
            if layer in self._links or not size or self.held + size > self.budget:
                return False
            self.held += size
            requests = coalesce({b: {o: (*f, []) for o, f in fs.items()} for b, fs in frames.items()}, self.max_range)
            futures = [self._pool.submit(self._fetch, name, blob, ranges, frames[blob]) for blob, ranges in requests]
            self._links[layer] = (size, futures)
        return True

    def has(self, layer: str) -> bool:
        """Whether ``layer`` was started and not taken yet."""
        with self._lock:
            return layer in self._links

    def take(self, layer: str) -> dict[str, bytes]:
        """The verified chunks read ahead for ``layer`` (digest -> bytes), waiting for them; empty
        when it was not read ahead, and only what arrived whole when part of it failed."""
        with self._lock:
            size, futures = self._links.pop(layer, (0, []))
        chunks: dict[str, bytes] = {}
        try:
            for future in futures:
                try:
                    chunks.update(future.result())
                except (HubError, OSError, AssemblyError, DigestMismatch, ManifestError):
                    continue  # the fill fetches these itself, and reports what goes wrong then
        finally:
            with self._lock:
                self.held -= size
        return chunks

    def close(self) -> None:
        """Drop what has not started; wait for what has (its chunks are dropped)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._links.clear()
            self.held = 0

    def _fetch(
        self, name: str, blob: str, ranges: list[tuple[int, int]], frames: dict[int, tuple[int, str, int]]
    ) -> dict[str, bytes]:
        """One hub request's ranges, every frame in them decompressed and checked against its digest."""
        bodies = self.client.open_ranges(name, blob, ranges)(ranges)
        chunks: dict[str, bytes] = {}
        offsets = sorted(frames)
        for (start, size), body in zip(ranges, bodies, strict=True):
            for offset in offsets[bisect.bisect_left(offsets, start) : bisect.bisect_left(offsets, start + size)]:
                flen, digest, length = frames[offset]
                frame = body[offset - start : offset - start + flen]
                chunks[digest] = decompress_chunk(frame, length, digest, f"chunk {digest} of blob {blob}")  # type: ignore[arg-type]  # typing debt, decisions/0008
        return chunks
