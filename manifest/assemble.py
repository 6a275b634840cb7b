"""Assemble a layer's file: parent image + chunk map → child image, byte-identical.

The parent is cloned with the filesystem's best tool (reflink, else
``copy_file_range``, holes kept), resized to the child's size, then only the
layer's chunks are written: data chunks are decompressed from their zstd frames
and checked against their digest. Zero chunks become holes in a base, but real zeros in a
link: forkd's daemon reads a hole in a link as "keep the parent's bytes" (see
:mod:`manifest.holes`). Finally the file's digest is checked against the chunk map: in format
version 2 its chunk tree (manifest.chunktree), from the chunk list the caller derived from the
parent's (O(chunks)) or else from the file's bytes; in version 1 the blake3 of its bytes. The output path should
be a ``*.partial`` name the caller renames into place; on any error it is removed.

Errors: :class:`~manifest.errors.DigestMismatch` (naming file and chunk index),
:class:`~manifest.errors.AssemblyError` (bad frame, wrong parent, size), OSError.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import blake3
import zstandard

from .chunktree import ChunkList, chunk_list_of_file
from .digest import digest_file
from .errors import AssemblyError, DigestMismatch
from .fileops import CloneMethod, can_reflink, clone_file, copy_ranges_except, punch_hole, start_writeback
from .holes import write_zeros
from .model import ChunkEntry, ChunkMap
from .zstdframe import FrameError, frame_length

#: ``(blob_digest, offset, length) -> frame bytes``: how assembly reads a chunk's zstd frame.
FrameSource = Callable[[str, int, int], bytes]

#: chunk bytes written into a file between two starts of its writeback (:meth:`FileAssembler.write`)
WRITEBACK_STEP = 32 << 20


@dataclass(frozen=True)
class AssembledFile:
    path: Path
    digests: dict[str, str]
    clone_method: CloneMethod | None
    chunks_written: int
    holes_punched: int


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor: one context per thread, not one per chunk."""
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def decompress_chunk(frame: bytes, expected_length: int, digest: str, what: str) -> bytes:
    """Decompress one chunk frame, bounded by ``expected_length``, and verify its digest.

    The frame must span ``frame`` exactly: bytes after it inside the chunk's entry would be
    stored and served without ever being verified.

    Raises: AssemblyError (not one zstd frame, bytes after it, wrong size), DigestMismatch.
    """
    if not digest.startswith("blake3:"):
        raise DigestMismatch(what, digest, "unverifiable (chunk digests are blake3)")
    try:
        end = frame_length(frame)
    except FrameError as e:
        raise AssemblyError(f"{what}: {e}") from None
    if end != len(frame):
        raise AssemblyError(
            f"{what}: {len(frame) - end} bytes follow the zstd frame inside the chunk's entry "
            f"(the frame is {end} bytes, the entry {len(frame)})"
        )
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as e:
        raise AssemblyError(f"{what}: not a zstd frame: {e}") from None
    if params.content_size != expected_length:
        raise AssemblyError(f"{what}: frame declares {params.content_size} bytes, chunk is {expected_length}")
    try:
        data = _decompressor().decompress(frame, max_output_size=expected_length)
    except zstandard.ZstdError as e:
        raise AssemblyError(f"{what}: corrupt zstd frame: {e}") from None
    if len(data) != expected_length:
        raise AssemblyError(f"{what}: frame holds {len(data)} bytes, chunk is {expected_length}")
    got = "blake3:" + blake3.blake3(data).hexdigest()
    if got != digest:
        raise DigestMismatch(what, digest, got)
    return data


class FileAssembler:
    """Assemble one file incrementally: start from the parent's file, write chunks as they
    arrive (any order, from any thread), then check the whole file.

    The constructor clones ``parent`` to ``out`` (reflink where possible; ``out`` must not
    exist), sets the size and zeroes the layer's zero chunks (holes in a base, real zeros in
    a link). With ``resume``, an ``out`` of
    the right size left by an interrupted assembly is kept as it is (``resumed`` is True) and
    :meth:`holds` tells which chunks it already has. :meth:`write` puts one chunk's verified
    bytes in place; :meth:`finish` fsyncs and checks the content digest. On any error, or
    :meth:`abort`, ``out`` is removed. With ``background``, a new ``out`` is set up on a thread of
    its own, so the caller can fetch and verify chunks meanwhile. Where the filesystem reflinks
    (:func:`~manifest.fileops.can_reflink`), that thread clones the parent and :meth:`write` waits
    for it. Elsewhere (ext4: a clone is a copy of every data byte) ``out`` is created at once and
    :meth:`write` does not wait: the thread copies the parent *around* every chunk the layer sets
    (:func:`~manifest.fileops.copy_ranges_except`), so the copy and the writes run together and
    the copy never touches a chunk's bytes. :meth:`holds`, :meth:`wait_whole`, :meth:`finish`,
    :meth:`close` and :meth:`abort` wait for the thread (and raise what setting up raised).
    ``parent_ready`` is called on that thread before the parent is read (e.g. to wait until the
    parent file is whole itself). ``on_ready`` is called once ``out`` is whole (parent's bytes
    in place, sized, zero chunks written): with a reflink before any chunk is written into it,
    else possibly after some (e.g. to mark it resumable only then: either way only verified
    chunks are in it).

    Errors: AssemblyError (no parent for a link, wrong chunk length), DigestMismatch, OSError.
    """

    def __init__(
        self,
        chunk_map: ChunkMap,
        out: str | os.PathLike[str],
        *,
        parent: str | os.PathLike[str] | None,
        resume: bool = False,
        background: bool = False,
        on_ready: Callable[[], None] | None = None,
        parent_ready: Callable[[], None] | None = None,
    ) -> None:
        self.chunk_map = chunk_map
        self.out = Path(out)
        if chunk_map.parent_digest is not None and parent is None:
            raise AssemblyError(f"{chunk_map.file}: chunk map applies to parent {chunk_map.parent_digest}, none given")
        self.clone_method: CloneMethod | None = None
        self.written = self.holes = 0
        self._since_writeback = 0  # bytes written since writeback was last started
        self.resumed = False
        self._fd = -1
        self._ready = threading.Event()  # ``out`` is open for chunk writes
        self._whole = threading.Event()  # ``out`` is whole (set up: parent's bytes, size, zero chunks)
        self._failed: BaseException | None = None
        self._on_ready, self._parent_ready = on_ready, parent_ready
        try:
            if resume and self.out.is_file() and self.out.stat().st_size == chunk_map.size:
                self._fd = os.open(self.out, os.O_RDWR)
                self.resumed = True
                self._zero_chunks(parent)
                self._announce()
            else:
                if resume:
                    self.out.unlink(missing_ok=True)
                if background and (parent is None or not can_reflink(self.out.parent)):
                    self._fd = os.open(self.out, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                    os.ftruncate(self._fd, chunk_map.size)
                    self._ready.set()  # chunks are written now, the parent copied around them meanwhile
                    threading.Thread(target=self._copy_around, args=(parent,), name="forkd-clone", daemon=True).start()
                    return
                if background:
                    threading.Thread(target=self._set_up, args=(parent,), name="forkd-clone", daemon=True).start()
                    return
                self._create(parent)
                self._zero_chunks(parent)
                self._announce()
            self._ready.set()
            self._whole.set()
        except BaseException:
            self._ready.set()
            self._whole.set()
            self.abort()
            raise

    def _create(self, parent: str | os.PathLike[str] | None) -> None:
        if parent is not None:
            self.clone_method = clone_file(parent, self.out)
            self._fd = os.open(self.out, os.O_RDWR)
        else:
            self._fd = os.open(self.out, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(self._fd, self.chunk_map.size)

    def _zero_chunks(self, parent: str | os.PathLike[str] | None) -> None:
        for entry in self.chunk_map.entries:
            if entry.is_zero:
                offset, length = entry.index * self.chunk_map.chunk_size, self.length(entry.index)
                if parent is None:
                    punch_hole(self._fd, offset, length)
                    self.holes += 1
                else:  # a link's hole would mean "the parent's bytes" to forkd
                    write_zeros(self._fd, offset, length)

    def _copy_around(self, parent: str | os.PathLike[str] | None) -> None:
        """The ``background`` thread without reflinks: copy the parent's data into ``out`` except
        the byte ranges of every chunk the layer sets (written by :meth:`write`, or zeroed here,
        so no order of the two can let the parent's bytes clobber a chunk), then zero the zero
        chunks. On failure ``out`` is removed (never resumed) and the error kept for whoever
        waits; the descriptor stays open for writers in flight, until :meth:`close`/:meth:`abort`."""
        try:
            if parent is not None:
                if self._parent_ready is not None:
                    self._parent_ready()
                cs, size = self.chunk_map.chunk_size, self.chunk_map.size
                keep = sorted((e.index * cs, self.length(e.index)) for e in self.chunk_map.entries)
                with open(parent, "rb") as src:
                    upto = min(os.fstat(src.fileno()).st_size, size)
                    self.clone_method = copy_ranges_except(src.fileno(), self._fd, upto, keep)
                start_writeback(self._fd)  # the copied bytes go to disk while the chunks arrive
            self._zero_chunks(parent)
            self._announce()
        except Exception as e:  # noqa: BLE001 - re-raised by whoever waits for the file next
            self._failed = e
            self.out.unlink(missing_ok=True)
        finally:
            self._whole.set()

    def _set_up(self, parent: str | os.PathLike[str] | None) -> None:
        """The ``background`` thread with reflinks: clone (or create) ``out``, size it, zero the zero chunks."""
        try:
            if parent is not None and self._parent_ready is not None:
                self._parent_ready()
            self._create(parent)
            self._zero_chunks(parent)
            self._announce()
        except Exception as e:  # noqa: BLE001 - re-raised by whoever waits for the file next
            self._failed = e
            if self._fd >= 0:  # a half set-up file is never resumed: removed, as a failed constructor does
                os.close(self._fd)
                self._fd = -1
            self.out.unlink(missing_ok=True)
        finally:
            self._ready.set()
            self._whole.set()

    def _announce(self) -> None:
        if self._on_ready is not None:
            self._on_ready()

    def _wait(self) -> None:
        """Wait until chunks can be written into ``out``; raise what setting it up raised."""
        self._ready.wait()
        if self._failed is not None:
            raise self._failed

    def wait_whole(self) -> None:
        """Wait until ``out`` is whole (the parent's bytes in place, zero chunks written); raise
        what setting it up raised (AssemblyError, OSError)."""
        self._whole.wait()
        if self._failed is not None:
            raise self._failed

    def is_whole(self) -> bool:
        """Whether setting ``out`` up is over (whole, or failed: :meth:`wait_whole` says which); never waits."""
        return self._whole.is_set()

    def holds(self, index: int, digest: str) -> bool:
        """Whether chunk ``index`` already holds the bytes of ``digest`` (read and hashed now)."""
        self.wait_whole()
        data = os.pread(self._fd, self.length(index), index * self.chunk_map.chunk_size)
        return "blake3:" + blake3.blake3(data).hexdigest() == digest

    def length(self, index: int) -> int:
        cs = self.chunk_map.chunk_size
        return min(cs, self.chunk_map.size - index * cs)

    def write(self, index: int, data: bytes | bytearray | memoryview) -> None:
        """Put chunk ``index``'s bytes (already verified against its digest) in place."""
        if len(data) != self.length(index):
            raise AssemblyError(
                f"{self.chunk_map.file} chunk {index}: {len(data)} bytes, expected {self.length(index)}"
            )
        self._wait()
        os.pwrite(self._fd, data, index * self.chunk_map.chunk_size)
        self.written += 1
        # the disk starts on what is written while the rest arrives, so finish's fsync has little
        # left to wait for (a heuristic: a racing update between writer threads only delays it)
        self._since_writeback += len(data)
        if self._since_writeback >= WRITEBACK_STEP:
            self._since_writeback = 0
            start_writeback(self._fd)

    def finish(
        self,
        *,
        verify: bool = True,
        extra_algorithms: tuple[str, ...] = (),
        chunk_list: ChunkList | None = None,
        hash_file: bool = True,
    ) -> AssembledFile:
        """Hash the whole file (blake3 of its bytes, plus ``extra_algorithms``), with ``verify``
        check it against the chunk map, and fsync it (its writeback starts first, and runs while
        it is hashed). ``chunk_list`` (format version 2): the file's chunk list, derived from the
        parent's and the chunk map, whose digest is checked instead of re-reading the file; then
        ``hash_file=False`` reads nothing at all (``digests`` is empty: the file's digest is its
        chunk tree, proven by construction)."""
        try:
            self.wait_whole()
            start_writeback(self._fd)
            algorithms = tuple(dict.fromkeys(("blake3", *extra_algorithms)))
            by_tree = not hash_file and chunk_list is not None and self.chunk_map.version >= 2
            # mapped: this file is ours alone until it is renamed into place
            digests = {} if by_tree else {a: str(d) for a, d in digest_file(self.out, algorithms, mapped=True).items()}
            if self.chunk_map.version >= 2:
                listed = (
                    chunk_list if chunk_list is not None else chunk_list_of_file(self.out, self.chunk_map.chunk_size)
                )
                got = listed.digest()
            else:
                got = digests["blake3"]
            if verify and got != self.chunk_map.digest:
                raise DigestMismatch(f"assembled {self.chunk_map.file}", self.chunk_map.digest, got)
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            return AssembledFile(self.out, digests, self.clone_method, self.written, self.holes)
        except BaseException:
            self.abort()
            raise

    def close(self) -> None:
        """Close the file, keeping what was written (an interrupted assembly to resume). Idempotent."""
        self._whole.wait()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def abort(self) -> None:
        """Close and remove the partial file. Idempotent."""
        self._whole.wait()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.out.unlink(missing_ok=True)


def assemble_file(
    chunk_map: ChunkMap,
    out: str | os.PathLike[str],
    *,
    parent: str | os.PathLike[str] | None,
    frames: FrameSource,
    verify: bool = True,
    extra_algorithms: tuple[str, ...] = (),
    local_chunk: Callable[[str], bytes | None] | None = None,
) -> AssembledFile:
    """Write the file described by ``chunk_map`` to ``out`` (which must not exist).

    ``parent`` is the parent layer's assembled file (None for a base). With
    ``verify`` the result's digest must equal ``chunk_map.digest``; the returned
    ``digests`` (over the file's bytes) hold blake3 and any ``extra_algorithms`` (e.g. ``sha256``).
    ``local_chunk(digest)`` may supply a chunk's raw bytes from elsewhere (another local file);
    they are used only if they hash to the digest, otherwise the frame is read.
    """
    assembler = FileAssembler(chunk_map, out, parent=parent)
    try:
        for entry in chunk_map.entries:
            if entry.is_zero:
                continue
            length = assembler.length(entry.index)
            data = local_chunk(entry.digest) if local_chunk is not None else None  # type: ignore[arg-type]
            if data is None or len(data) != length or "blake3:" + blake3.blake3(data).hexdigest() != entry.digest:
                data = _read_chunk(chunk_map, entry, length, frames)
            assembler.write(entry.index, data)
    except BaseException:
        assembler.abort()
        raise
    return assembler.finish(verify=verify, extra_algorithms=extra_algorithms)


def _read_chunk(chunk_map: ChunkMap, entry: ChunkEntry, length: int, frames: FrameSource) -> bytes:
    blob = chunk_map.blobs[entry.blob]
    what = f"{chunk_map.file} chunk {entry.index} ({entry.digest})"
    frame = frames(blob, entry.offset, entry.length)
    if len(frame) != entry.length:
        raise AssemblyError(f"{what}: got {len(frame)} frame bytes from {blob}, expected {entry.length}")
    return decompress_chunk(frame, length, entry.digest, what)  # type: ignore[arg-type]


def blob_dir_frames(directory: str | os.PathLike[str]) -> FrameSource:
    """A FrameSource reading data blobs stored as ``<dir>/<algorithm>-<hex>`` files (LayerBuilder's output)."""
    root = Path(directory)

    def read(blob: str, offset: int, length: int) -> bytes:
        path = root / blob.replace(":", "-")
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    return read
