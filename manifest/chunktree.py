"""Chunk-tree file digests (format version 2): a file named by its size, chunk size and chunk digests.

The digest of a chunked file is blake3 over a canonical encoding (docs/manifest-format.md §2)::

    "forkd.chunktree.v1" 0x00 || u64le(size) || u32le(chunkSize) || d[0] || d[1] || … || d[count-1]

where ``d[i]`` is the raw 32-byte blake3 digest of chunk ``i``'s exact bytes, or 32 zero bytes
when chunk ``i`` is all zeros (whatever its length). So a client holding the parent's chunk list
and a layer's chunk map knows the child's list, and checks the child's file digest in
O(chunks): :class:`ChunkList` is that list. :func:`file_chunk_tree` computes it from a file's
bytes (O(bytes), for pushers and deep checks), skipping holes without reading them.

Errors: :class:`~manifest.errors.InvalidChunkSize`; :class:`~manifest.errors.InvalidDigest`
for a chunk digest that is not ``blake3:``; OSError from reading files.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

import blake3

from .chunking import ChunkGeometry, chunk_spans, is_zero, iter_span_blocks
from .errors import InvalidDigest
from .fileops import data_ranges

DOMAIN = b"forkd.chunktree.v1\x00"
DIGEST_BYTES = 32
ZERO_CHUNK = bytes(DIGEST_BYTES)
"""The fixed ``d[i]`` of an all-zero chunk."""


def raw_chunk_digest(digest: str | None) -> bytes:
    """``d[i]`` for a chunk map entry: the raw bytes of a ``blake3:`` digest, ZERO_CHUNK for None."""
    if digest is None:
        return ZERO_CHUNK
    algorithm, _, hexpart = digest.partition(":")
    if algorithm != "blake3" or len(hexpart) != 64:
        raise InvalidDigest(f"chunk digest {digest[:80]!r} is not a blake3 digest")
    return bytes.fromhex(hexpart)


class ChunkList:
    """The ordered chunk digests of one file: what its chunk-tree digest is computed over."""

    __slots__ = ("_d", "geometry")

    def __init__(self, size: int, chunk_size: int, digests: bytes | bytearray | None = None) -> None:
        self.geometry = ChunkGeometry(size, chunk_size)
        want = self.geometry.count * DIGEST_BYTES
        self._d = bytearray(digests) if digests is not None else bytearray(want)
        if len(self._d) != want:
            raise ValueError(f"a chunk list of a {size}-byte file needs {want} digest bytes, got {len(self._d)}")

    @property
    def size(self) -> int:
        return self.geometry.size

    @property
    def chunk_size(self) -> int:
        return self.geometry.chunk_size

    def __getitem__(self, index: int) -> bytes:
        return bytes(self._d[index * DIGEST_BYTES : (index + 1) * DIGEST_BYTES])

    def set(self, index: int, raw: bytes) -> None:
        """Set ``d[index]`` (32 raw bytes; ZERO_CHUNK for a zero chunk)."""
        if not 0 <= index < self.geometry.count:
            raise IndexError(f"chunk index {index} out of range ({self.geometry.count} chunks)")
        self._d[index * DIGEST_BYTES : (index + 1) * DIGEST_BYTES] = raw

    def resized(self, size: int, chunk_size: int | None = None) -> ChunkList:
        """The list of the parent file truncated or zero-extended to ``size`` (what a chunk map applies to).

        Raises ValueError when ``chunk_size`` differs (a layer cannot change a file's chunk size).
        """
        if chunk_size is not None and chunk_size != self.chunk_size:
            raise ValueError(f"chunk size {chunk_size} differs from the parent's {self.chunk_size}")
        geometry = ChunkGeometry(size, self.chunk_size)
        want = geometry.count * DIGEST_BYTES
        kept = min(want, len(self._d))
        out = ChunkList.__new__(ChunkList)  # one new list, not three transient copies of it
        out.geometry, out._d = geometry, bytearray(want)
        out._d[:kept] = memoryview(self._d)[:kept]
        return out

    def apply(self, entries: Iterable[tuple[int, str | None]]) -> None:
        """Apply a layer's entries ``(index, chunk digest or None for zero)`` in place."""
        for index, digest in entries:
            self.set(index, raw_chunk_digest(digest))

    def digest(self) -> str:
        """The chunk-tree digest, ``blake3:<hex>``."""
        h = blake3.blake3(DOMAIN)
        h.update(struct.pack("<QI", self.size, self.chunk_size))
        h.update(self._d)
        return "blake3:" + h.hexdigest()


def apply_map(
    parent: ChunkList | None, entries: Iterable[tuple[int, str | None]], size: int, chunk_size: int
) -> ChunkList:
    """The chunk list of a layer's file: the parent's list (None: no parent file) truncated or
    zero-extended to ``size``, with the layer's entries applied. O(chunks).

    Raises ValueError (the chunk size changed), IndexError (an entry past the end), InvalidDigest.
    """
    out = (parent if parent is not None else ChunkList(0, chunk_size)).resized(size, chunk_size)
    out.apply(entries)
    return out


def chunk_list_of_file(path: str | os.PathLike[str], chunk_size: int) -> ChunkList:
    """The chunk list of a file, hashing every non-zero chunk (holes are not read)."""
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        out = ChunkList(size, chunk_size)
        geometry = out.geometry
        for span in chunk_spans(data_ranges(fd, size), geometry):
            for start, block in iter_span_blocks(fd, span, geometry):
                view = memoryview(block)
                for k in range(0, len(block), chunk_size):
                    piece = view[k : k + chunk_size]
                    if not is_zero(piece):
                        out.set(start + k // chunk_size, blake3.blake3(piece).digest())
    return out


def file_chunk_tree(path: str | os.PathLike[str], chunk_size: int) -> str:
    """The chunk-tree digest of a file's current bytes (O(bytes))."""
    return chunk_list_of_file(path, chunk_size).digest()


__all__ = [
    "DOMAIN",
    "ZERO_CHUNK",
    "ChunkList",
    "apply_map",
    "chunk_list_of_file",
    "file_chunk_tree",
    "raw_chunk_digest",
]
