"""Build a layer's storage form: chunk maps plus data blobs of zstd frames.

A :class:`LayerBuilder` takes the changed chunks of each file of a layer (from
:func:`manifest.diff.diff_files`) and writes every changed non-zero chunk, each as its own
zstd frame, into one or a few data blobs in ``out_dir``; a chunk repeated inside the layer
is written once and referenced after. Nothing else is an input: the bytes are a pure
function of the chunks, in the order given (format version 2, docs/manifest-format.md §3;
what the hub already holds is dealt with below the graph, by the push). ``finish()`` closes
the blobs, names them by the sha256 of their bytes and returns one
:class:`~manifest.model.ChunkMap` per file; each :class:`DataBlob` lists its frames
(:class:`Frame`: the blake3 of the frame bytes, the chunk digest and both lengths), what a
push negotiates and uploads by.

Frames are deterministic: zstd level 3, content size written, no checksum, no dictionary, one
frame per chunk compressed alone (``ZstdCompressor(level=3, write_content_size=True,
write_checksum=False)``; the same zstd library gives the same bytes).

New chunks are compressed on a few threads (zstd releases the GIL) while the caller's iterator
reads and hashes the next ones; frames are appended strictly in the order the chunks came, so
the blobs are byte-identical to a one-thread build (a resumed push relies on that).

Errors: OSError from writing ``out_dir``; :class:`~manifest.errors.AssemblyError`
when used after ``finish()``.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import blake3
import zstandard

from .diff import ChunkChange
from .digest import Hasher
from .errors import AssemblyError
from .model import ChunkEntry, ChunkMap

DEFAULT_MAX_BLOB_BYTES = 1 << 30
DEFAULT_ZSTD_LEVEL = 3
#: frames being compressed at once, at most (64 KiB chunks: a few MiB of memory)
COMPRESS_WINDOW = 64


BLOB_ALGORITHM = "sha256"


@dataclass(frozen=True, slots=True)
class Frame:
    """One zstd frame of a data blob: ``length`` bytes at ``offset``, whose own bytes hash to
    ``digest`` (blake3) and decompress to ``raw_length`` bytes hashing to ``chunk``."""

    offset: int
    length: int
    digest: str
    chunk: str
    raw_length: int


@dataclass(frozen=True)
class DataBlob:
    """A finished data blob on disk, named by the digest of its bytes, with its frames in order."""

    path: Path
    digest: str
    size: int
    frames: tuple[Frame, ...] = ()


@dataclass
class LayerStats:
    """What building the layer did, for progress output and tests."""

    changed_chunks: int = 0
    zero_chunks: int = 0
    new_chunks: int = 0
    reused_chunks: int = 0
    new_raw_bytes: int = 0
    new_stored_bytes: int = 0
    per_file: dict[str, int] = field(default_factory=dict)


@dataclass
class _OpenBlob:
    path: Path
    handle: object
    hasher: Hasher
    size: int = 0
    frames: list[Frame] = field(default_factory=list)


@dataclass
class _PendingFile:
    file: str
    size: int
    chunk_size: int
    digest: str | None
    parent_digest: str | None
    entries: list[tuple[int, str | None, list]]  # (index, digest, slot): slot[0] is (blob, offset, length)


class LayerBuilder:
    """Accumulates the files of one layer and writes its new chunks into data blobs."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        level: int = DEFAULT_ZSTD_LEVEL,
        threads: int | None = None,
        on_frame: Callable[[int, Frame, bytes], None] | None = None,
    ) -> None:
        """``on_frame(blob number, frame, bytes)`` is called for every frame as it is appended to
        the number-th data blob (in order, on the thread calling ``add_file``): a push uploads
        frames while the layer is still being built. What it raises stops the build."""
        self.out_dir = Path(out_dir)
        self._on_frame = on_frame
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._max_blob = max_blob_bytes
        self._level = level
        self._local = threading.local()
        threads = threads if threads is not None else min(4, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="zstd") if threads > 1 else None
        self._inflight: deque[tuple[Future[tuple[bytes, str]], list, str, int]] = deque()
        self._seen: dict[str, list] = {}
        self._blobs: list[_OpenBlob] = []
        self._current: _OpenBlob | None = None
        self._files: list[_PendingFile] = []
        self._finished = False
        self.stats = LayerStats()

    def add_file(
        self,
        file: str,
        changes: Iterable[ChunkChange],
        *,
        size: int,
        chunk_size: int,
        digest: str | None,
        parent_digest: str | None,
    ) -> None:
        """Record the changes of one file (``file`` is its role, e.g. ``memory.bin``). ``digest`` (the
        file's chunk tree) may be None and given after, with :meth:`set_digest`, once the pass over
        ``changes`` that computes it is done."""
        if self._finished:
            raise AssemblyError("LayerBuilder.add_file called after finish()")
        pending = _PendingFile(file, size, chunk_size, digest, parent_digest, [])
        count = 0
        try:
            for change in changes:
                count += 1
                self.stats.changed_chunks += 1
                if change.data is None:
                    self.stats.zero_chunks += 1
                    pending.entries.append((change.index, None, [None]))
                    continue
                assert change.digest is not None
                slot = self._seen.get(change.digest)
                if slot is None:
                    slot = self._compress_later(change.data, change.digest)
                    self.stats.new_chunks += 1
                    self.stats.new_raw_bytes += len(change.data)
                    self._seen[change.digest] = slot
                else:
                    self.stats.reused_chunks += 1
                pending.entries.append((change.index, change.digest, slot))
            self._drain(0)
        except BaseException:
            self._abandon()
            raise
        self.stats.per_file[file] = count
        self._files.append(pending)

    def set_digest(self, file: str, digest: str) -> None:
        """Give the chunk-tree digest of ``file``, added with ``digest=None``.

        Raises AssemblyError when no such file was added."""
        for pending in self._files:
            if pending.file == file:
                pending.digest = digest
                return
        raise AssemblyError(f"LayerBuilder.set_digest: no file {file!r} was added")

    def _compress(self, data: bytes) -> bytes:
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:  # one per thread: a ZstdCompressor is not thread-safe
            compressor = self._local.compressor = zstandard.ZstdCompressor(
                level=self._level, write_content_size=True, write_checksum=False
            )
        return compressor.compress(data)

    def _frame(self, data: bytes) -> tuple[bytes, str]:
        """Compress ``data`` and hash the frame (both in a worker thread when there is a pool)."""
        frame = self._compress(data)
        return frame, "blake3:" + blake3.blake3(frame).hexdigest()

    def _compress_later(self, data: bytes, chunk: str) -> list:
        """Queue ``data`` for compression; its slot is filled when the frame is appended."""
        slot: list = [None]
        if self._pool is None:
            slot[0] = self._append_frame(self._frame(data), chunk, len(data))
            return slot
        self._inflight.append((self._pool.submit(self._frame, data), slot, chunk, len(data)))
        self._drain(COMPRESS_WINDOW)
        return slot

    def _drain(self, keep: int) -> None:
        """Append finished frames, oldest first, until at most ``keep`` are in flight."""
        while len(self._inflight) > keep:
            future, slot, chunk, raw_length = self._inflight.popleft()
            slot[0] = self._append_frame(future.result(), chunk, raw_length)

    def _abandon(self) -> None:
        for future, *_ in self._inflight:
            future.cancel()
        self._inflight.clear()
        self._shutdown()

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _append_frame(self, framed: tuple[bytes, str], chunk: str, raw_length: int) -> tuple[object, int, int]:
        frame, frame_digest = framed
        blob = self._current
        if blob is None or (blob.size and blob.size + len(frame) > self._max_blob):
            blob = self._open_blob()
        offset = blob.size
        blob.handle.write(frame)  # type: ignore[attr-defined]
        blob.hasher.update(frame)
        blob.frames.append(Frame(offset, len(frame), frame_digest, chunk, raw_length))
        blob.size += len(frame)
        if self._on_frame is not None:
            self._on_frame(len(self._blobs) - 1, blob.frames[-1], frame)
        self.stats.new_stored_bytes += len(frame)
        return blob, offset, len(frame)

    def _open_blob(self) -> _OpenBlob:
        path = self.out_dir / f".blob-{len(self._blobs)}.partial"
        blob = _OpenBlob(path, open(path, "wb"), Hasher(BLOB_ALGORITHM))  # noqa: SIM115 - open across appends, closed by finish/abort
        self._blobs.append(blob)
        self._current = blob
        return blob

    def finish(self) -> tuple[dict[str, ChunkMap], list[DataBlob]]:
        """Close the data blobs and return ``({file: ChunkMap}, [DataBlob])``.

        Raises AssemblyError when called twice or when a file's digest was never given."""
        if self._finished:
            raise AssemblyError("LayerBuilder.finish called twice")
        unnamed = [pending.file for pending in self._files if pending.digest is None]
        if unnamed:
            raise AssemblyError(f"LayerBuilder.finish: no chunk-tree digest given for {', '.join(unnamed)}")
        self._finished = True
        self._shutdown()
        names: dict[int, str] = {}
        blobs: list[DataBlob] = []
        for blob in self._blobs:
            blob.handle.close()  # type: ignore[attr-defined]
            digest = str(blob.hasher.digest())
            final = self.out_dir / digest.replace(":", "-")
            os.replace(blob.path, final)
            names[id(blob)] = digest
            blobs.append(DataBlob(final, digest, blob.size, tuple(blob.frames)))
        maps: dict[str, ChunkMap] = {}
        for pending in self._files:
            order: dict[str, int] = {}
            entries: list[ChunkEntry] = []
            for index, chunk_digest, slot in pending.entries:
                if chunk_digest is None:
                    entries.append(ChunkEntry(index, None))
                    continue
                blob_ref, offset, length = slot[0]
                blob_digest = names[id(blob_ref)]
                blob_index = order.setdefault(blob_digest, len(order))
                entries.append(ChunkEntry(index, chunk_digest, blob_index, offset, length))
            maps[pending.file] = ChunkMap(
                pending.file,
                pending.size,
                pending.chunk_size,
                pending.digest,  # type: ignore[arg-type]  # checked above
                pending.parent_digest,
                tuple(order),
                tuple(entries),
            )
        return maps, blobs

    def abort(self) -> None:
        """Stop compressing, close and delete any partial blobs (call on error)."""
        self._finished = True
        self._abandon()
        for blob in self._blobs:
            try:
                blob.handle.close()  # type: ignore[attr-defined]
            finally:
                blob.path.unlink(missing_ok=True)
