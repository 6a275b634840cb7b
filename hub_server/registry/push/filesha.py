"""Format v2: proving the whole-file ``sha256`` a pushed layer declares, by streaming its assembled files.

A layer's config declares, for each chunked file (memory.bin, rootfs.ext4), its chunk-tree digest
(proven in O(chunks) by :mod:`filetrees`) and the ``sha256`` of its bytes (forkd's
``parent_content_hash``, the listed sha256 of a forkd pack). A false ``sha256`` with a right chunk
tree would make every forkd pack build of the layer fail (issue 27, item 5), so the push proves it:
the file's bytes are rebuilt in file order from the chain's chunk maps — each chunk from the frame
of the newest link that set it, a zero chunk as zeros — and hashed, never held whole: ≤ 16 MiB of
frames and of chunks at a time, zeros hashed from one small buffer, decompression and hashing in a
worker thread (hashlib and zstd release the GIL). A file whose sha256 is not the declared one is
refused with ``DIGEST_INVALID`` (detail ``file``, ``declared``, ``actual``) before anything is written.

**What it costs, and how it is bounded** (docs/limits.md): CPU O(declared file size) ≤
``FORKD_HUB_FILE_BYTES`` per file (~50 s at 64 GiB), whatever was uploaded (chunks shared with a
parent or all-zero cost hashing, not upload), plus reading the chain's chunk maps once (≤
``FORKD_HUB_CHAIN_DEPTH`` maps of ≤ ``FORKD_HUB_CHUNK_MAP_BYTES``, parsed in worker threads); reads ≤ one
per stored chunk of the file (frames close together in one blob are read together); memory ≤ 24 bytes per
chunk (``FORKD_HUB_FILE_CHUNKS``), one parsed chunk map and 32 MiB. Every O(chunks) loop runs in a worker
thread too. So:

- at most ``FORKD_HUB_FILE_SHA256_CHECKS`` layers are proven at once in a hub process (default 2, on a
  :class:`anyio.CapacityLimiter`; more pushes wait their turn), one namespace holding at most half of
  those turns (at least one), and ``0`` turns the check off (a hub whose pushers are trusted; the
  damage marks of ``registry/forkd/compat.py`` remain);
- a manifest the hub already stores is not hashed again (a re-push, a retag, a mount: the database
  row is the memory, shared by every replica; a manifest stored before this check existed is
  covered by the damage marks of pack builds);
- a file a layer leaves unchanged (no chunk map entries, the parent's size and sha256) is not hashed.

Errors: ``HubError(DIGEST_INVALID)`` (a false sha256, or a stored frame that no longer decompresses
to its chunk: detail ``file``), storage errors of the reads.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
import zstandard

from hub_server.db.models import Manifest
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.recipes import blob_layout, read_blob_range
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.push.filetrees import maps_of
from manifest.model import ChunkMap

__all__ = ["SHA256_PIECE", "FileLayout", "FileSha256Checker"]

#: Most bytes of chunks (and of frames) one step reads and hashes; zeros are hashed in larger steps.
SHA256_PIECE = 16 << 20
_ZERO_STEP = 256 << 20
_ZEROS = bytes(1 << 20)
#: Frames of one blob closer than this are read in one request.
_GAP = 64 << 10


@dataclass
class FileLayout:
    """Where each chunk of one assembled file lives: compact arrays, 24 bytes a chunk.

    ``blob[i]`` indexes :attr:`blobs` (-1: zeros); the chunk is ``raw[i]`` bytes decompressed from
    ``length[i]`` bytes at ``offset[i]``, of which the first ``keep[i]`` are the file's (a later link
    may have truncated the file inside it), then zeros up to the chunk's length.
    """

    size: int = 0
    chunk_size: int = 0
    blobs: list[str] = field(default_factory=list)
    blob: array[int] = field(default_factory=lambda: array("i"))
    offset: array[int] = field(default_factory=lambda: array("Q"))
    length: array[int] = field(default_factory=lambda: array("I"))
    raw: array[int] = field(default_factory=lambda: array("I"))
    keep: array[int] = field(default_factory=lambda: array("I"))

    def apply(self, chunk_map: ChunkMap) -> None:
        """The file of the next link: resize (or start over, for a map with no parent), then set its entries."""
        cs = chunk_map.chunk_size
        count = -(-chunk_map.size // cs)
        if chunk_map.parent_digest is None:
            self._truncate(0)
        self._truncate(count)
        grow = count - len(self.blob)
        if grow > 0:
            self.blob.extend(array("i", [-1]) * grow)
            for column in (self.offset, self.length, self.raw, self.keep):
                column.extend(array(column.typecode, [0]) * grow)
        if count and chunk_map.size % cs and self.blob[count - 1] >= 0:  # the last chunk got shorter, maybe
            self.keep[count - 1] = min(self.keep[count - 1], chunk_map.size - (count - 1) * cs)
        self.size, self.chunk_size = chunk_map.size, cs
        ids = [self._blob_id(b) for b in chunk_map.blobs]
        for e in chunk_map.entries:
            if e.digest is None:
                self.blob[e.index] = -1
                continue
            raw = min(cs, chunk_map.size - e.index * cs)
            self.blob[e.index], self.offset[e.index], self.length[e.index] = ids[e.blob], e.offset, e.length
            self.raw[e.index] = self.keep[e.index] = raw

    def chunk_length(self, index: int) -> int:
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def steps(self) -> Iterator[range]:
        """The chunk indexes in file order, cut into steps of ≤ SHA256_PIECE stored bytes (≤ _ZERO_STEP in all)."""
        start, stored, total = 0, 0, 0
        for i in range(len(self.blob)):
            n = self.chunk_length(i)
            if i > start and (stored + n > SHA256_PIECE or total + n > _ZERO_STEP):
                yield range(start, i)
                start, stored, total = i, 0, 0
            total += n
            stored += n if self.blob[i] >= 0 else 0
        if start < len(self.blob):
            yield range(start, len(self.blob))

    def _truncate(self, count: int) -> None:
        for column in (self.blob, self.offset, self.length, self.raw, self.keep):
            del column[count:]

    def _blob_id(self, digest: str) -> int:
        try:
            return self.blobs.index(digest)
        except ValueError:
            self.blobs.append(digest)
            return len(self.blobs) - 1


#: ``(blob index, offset, length) -> bytes`` for the frames of one step (read on the event loop).
_Frames = dict[tuple[int, int], bytes]


class FileSha256Checker:
    """The hub's whole-file sha256 proofs at push (one per process: it holds the concurrency limit)."""

    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx
        self.concurrency = ctx.limits.file_sha256_checks
        self.per_namespace = max(1, self.concurrency // 2)
        """Turns one namespace may hold at once: half of them (at least one), so one tenant pushing
        without pause delays the others' pushes, never stops them."""
        self._limiter = anyio.CapacityLimiter(self.concurrency) if self.concurrency > 0 else None
        self._namespaces: dict[str, tuple[anyio.CapacityLimiter, list[int]]] = {}
        self.on_step: Callable[[int], None] | None = None
        """Called in the hashing worker thread after each step with the bytes it hashed (tests, curiosity)."""

    @asynccontextmanager
    async def turn(self, namespace: str) -> AsyncIterator[None]:
        """Wait for one of the namespace's turns, then one of the hub's (the caller checked the limiter is on)."""
        assert self._limiter is not None
        entry = self._namespaces.get(namespace)
        if entry is None:
            entry = self._namespaces[namespace] = (anyio.CapacityLimiter(self.per_namespace), [0])
        entry[1][0] += 1
        try:
            async with entry[0], self._limiter:
                yield
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:  # nobody holds or waits for it: the table keeps only namespaces at work
                del self._namespaces[namespace]

    async def check(
        self,
        namespace: str,
        digest: str,
        maps: list[ChunkMap],
        ancestors: list[str],
        declared: dict[str, str],
        unchanged: set[str],
    ) -> None:
        """Prove ``declared[file]`` (``sha256:<hex>``) for each map of the layer ``digest`` (chain ``ancestors``,
        base → parent) pushed to ``namespace``, except files in ``unchanged``. Raises HubError(DIGEST_INVALID)."""
        wanted = [m for m in maps if m.file in declared and m.file not in unchanged]
        if self._limiter is None or not wanted:
            return
        async with self.ctx.sessions() as session:
            if await session.get(Manifest, digest) is not None:
                return
        async with self.turn(namespace):  # the whole proof takes a turn: reading the chain's maps, then hashing
            layouts = {m.file: FileLayout() for m in wanted}
            if any(m.parent_digest is not None for m in wanted):
                async with self.ctx.sessions() as session:  # closed before hashing: no connection held for a minute
                    for link in ancestors:  # base first, one link's maps at a time
                        for chunk_map in await maps_of(self.ctx, session, link):
                            if chunk_map.file in layouts:
                                await anyio.to_thread.run_sync(layouts[chunk_map.file].apply, chunk_map)
            for chunk_map in wanted:
                layout = layouts.pop(chunk_map.file)
                await anyio.to_thread.run_sync(layout.apply, chunk_map)
                actual = await self._hash(layout, chunk_map.file)
                if actual != declared[chunk_map.file]:
                    raise HubError(
                        ErrorCode.DIGEST_INVALID,
                        f"{chunk_map.file} declares sha256 {declared[chunk_map.file]}, but its assembled bytes hash "
                        f"to {actual}: every forkd pack of this layer would fail (or a stored frame of its chain is damaged: "
                        "forkd-hub verify)",
                        {"file": chunk_map.file, "declared": declared[chunk_map.file], "actual": actual},
                    )

    async def _hash(self, layout: FileLayout, file: str) -> str:
        hasher = hashlib.sha256()
        sizes: dict[int, tuple[int, bool]] = {}
        for step in await anyio.to_thread.run_sync(lambda: list(layout.steps())):  # O(chunks): off the loop
            frames = await self._read_frames(layout, step, sizes)
            hashed = await anyio.to_thread.run_sync(_hash_step, hasher, layout, step, frames, file, self.on_step)
            self.ctx.metrics.push_sha256_bytes.inc(hashed)
        return "sha256:" + hasher.hexdigest()

    async def _read_frames(self, layout: FileLayout, step: range, sizes: dict[int, tuple[int, bool]]) -> _Frames:
        wanted = await anyio.to_thread.run_sync(_frames_of, layout, step)
        frames: _Frames = {}
        run: list[tuple[int, int, int]] = []
        for frame in [*wanted, None]:
            if run and (frame is None or frame[0] != run[0][0] or frame[1] > run[-1][1] + run[-1][2] + _GAP):
                blob = run[0][0]
                if blob not in sizes:
                    sizes[blob] = await blob_layout(self.ctx, layout.blobs[blob])
                size, recipe = sizes[blob]
                start, end = run[0][1], max(o + n for _, o, n in run)
                data = await read_blob_range(self.ctx, layout.blobs[blob], start, end - start, recipe=recipe, size=size)
                frames.update(((b, o), data[o - start : o - start + n]) for b, o, n in run)
                run = []
            if frame is not None:
                run.append(frame)
        return frames


def _frames_of(layout: FileLayout, step: range) -> list[tuple[int, int, int]]:
    """The distinct stored frames ``step`` needs, sorted by blob and offset: ``(blob index, offset, length)``."""
    return sorted({(layout.blob[i], layout.offset[i], layout.length[i]) for i in step if layout.blob[i] >= 0})


def _hash_step(
    hasher: hashlib._Hash,
    layout: FileLayout,
    step: range,
    frames: _Frames,
    file: str,
    on_step: Callable[[int], None] | None = None,
) -> int:
    """Hash the chunks of ``step`` in order (in a worker thread), then call ``on_step`` there; return how
    many bytes were hashed."""
    dctx = zstandard.ZstdDecompressor()
    hashed = 0
    for i in step:
        n = layout.chunk_length(i)
        hashed += n
        b = layout.blob[i]
        if b < 0:
            _hash_zeros(hasher, n)
            continue
        frame = frames[(b, layout.offset[i])]
        try:
            data = dctx.decompress(frame, max_output_size=layout.raw[i])
        except zstandard.ZstdError as e:
            raise _damaged(layout, i, file, str(e)) from None
        if len(data) != layout.raw[i]:
            raise _damaged(layout, i, file, f"{len(data)} bytes, not {layout.raw[i]}")
        keep = min(layout.keep[i], n)
        hasher.update(memoryview(data)[:keep])
        _hash_zeros(hasher, n - keep)
    if on_step is not None:
        on_step(hashed)
    return hashed


def _hash_zeros(hasher: hashlib._Hash, n: int) -> None:
    while n > 0:
        piece = min(n, len(_ZEROS))
        hasher.update(memoryview(_ZEROS)[:piece])
        n -= piece


def _damaged(layout: FileLayout, index: int, file: str, why: str) -> HubError:
    blob = layout.blobs[layout.blob[index]]
    return HubError(
        ErrorCode.DIGEST_INVALID,
        f"{file} chunk {index}: the stored frame at {layout.offset[index]} in blob {blob} does not decompress "
        f"to its chunk: {why}",
        {"file": file, "chunk": index, "blob": blob, "offset": layout.offset[index]},
    )
