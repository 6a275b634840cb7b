"""Diff a child file image against its parent: the chunks that changed.

``diff_files(parent, child)`` yields one :class:`ChunkChange` per chunk index
whose bytes in ``child`` differ from the parent's bytes at the same index (the
parent truncated or zero-extended to the child's size, exactly what assembly
starts from). A change is either new data (with its blake3 digest) or "zero"
(the chunk became all zeros; assembly punches a hole). With no parent every
non-zero chunk is a change, which is how a base layer is built.

When the sizes differ, a chunk whose length changes (the parent's short last chunk, the
child's short last chunk) counts as changed unless both are all zeros, so a chunk map always
turns the parent's chunk list into the child's (manifest.chunktree: a zero chunk has one
digest whatever its length, any other chunk's digest covers its length).

Only the allocated ranges of the two files are read (``SEEK_DATA``), so diffing a
mostly-empty 16 GiB image costs what its data costs.

Given a :class:`~manifest.chunktree.ChunkList` of the child's geometry, the same pass fills it
with the digest of every non-zero chunk of the child, changed or not: the child's chunk-tree
file digest comes out of the diff's read instead of a second pass over the file (a push).

Errors: OSError from reading; :class:`~manifest.errors.InvalidChunkSize`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import blake3

from .chunking import DEFAULT_CHUNK_SIZE, ChunkGeometry, chunk_spans, is_zero, iter_span_blocks, read_padded
from .chunktree import ChunkList
from .fileops import data_ranges


@dataclass(frozen=True, slots=True)
class ChunkChange:
    """Chunk ``index`` of the child differs from the parent.

    ``data`` is None when the chunk became all zeros; otherwise ``digest`` is the
    ``blake3:<hex>`` digest of ``data``.
    """

    index: int
    digest: str | None
    data: bytes | None

    @property
    def is_zero(self) -> bool:
        return self.data is None


def diff_files(
    parent: str | os.PathLike[str] | None,
    child: str | os.PathLike[str],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_list: ChunkList | None = None,
) -> Iterator[ChunkChange]:
    """Yield the chunks of ``child`` that differ from ``parent``, in index order.

    With ``chunk_list`` (all zero digests, the child's size and chunk size), also set the digest
    of every non-zero chunk of the child in it; it is complete once the iterator is exhausted.
    Raises ValueError when its geometry is not the child's."""
    with open(child, "rb", buffering=0) as fc:
        cfd = fc.fileno()
        geometry = ChunkGeometry(os.fstat(cfd).st_size, chunk_size)
        if chunk_list is not None and (chunk_list.size, chunk_list.chunk_size) != (geometry.size, chunk_size):
            raise ValueError(
                f"the chunk list is of a {chunk_list.size}-byte file in {chunk_list.chunk_size}-byte chunks, "
                f"{child} has {geometry.size} bytes in {chunk_size}-byte chunks"
            )
        ranges = list(data_ranges(cfd, geometry.size))
        if parent is None:
            yield from _changes(cfd, None, 0, geometry, ranges, chunk_list)
            return
        with open(parent, "rb", buffering=0) as fp:
            pfd = fp.fileno()
            psize = os.fstat(pfd).st_size
            ranges += list(data_ranges(pfd, min(psize, geometry.size)))
            # chunks whose length changes are always compared (their parent bytes may lie past the child's end)
            ranges += [(i * chunk_size, geometry.length(i)) for i in _boundary(psize, geometry)]
            yield from _changes(cfd, pfd, psize, geometry, ranges, chunk_list)


def _boundary(psize: int, geometry: ChunkGeometry) -> set[int]:
    """Chunk indexes whose length differs between parent and child (only when sizes differ)."""
    if psize == geometry.size:
        return set()
    cs = geometry.chunk_size
    out = set()
    for index in (-(-psize // cs) - 1, geometry.count - 1):
        if 0 <= index < geometry.count and min(cs, max(0, psize - index * cs)) != geometry.length(index):
            out.add(index)
    return out


def _changes(
    cfd: int,
    pfd: int | None,
    psize: int,
    geometry: ChunkGeometry,
    ranges: list[tuple[int, int]],
    chunk_list: ChunkList | None,
) -> Iterator[ChunkChange]:
    cs = geometry.chunk_size
    boundary = _boundary(psize, geometry) if pfd is not None else set()
    for span in chunk_spans(ranges, geometry):
        for start, block in iter_span_blocks(cfd, span, geometry):
            offset = start * cs
            if pfd is not None and offset < psize:
                pblock = read_padded(pfd, min(len(block), psize - offset), offset)
                if len(pblock) < len(block):
                    pblock += bytes(len(block) - len(pblock))
            else:
                pblock = None
            for k in range(0, len(block), cs):
                piece = block[k : k + cs]
                index = start + k // cs
                zero = is_zero(piece)
                raw = None if zero else blake3.blake3(piece).digest() if chunk_list is not None else None
                if raw is not None:
                    chunk_list.set(index, raw)  # type: ignore[union-attr]
                if index in boundary:
                    assert pfd is not None
                    plen = min(cs, max(0, psize - index * cs))
                    if zero and is_zero(read_padded(pfd, plen, index * cs)):
                        continue
                    if zero:
                        yield ChunkChange(index, None, None)
                        continue
                elif pblock is not None:
                    if piece == pblock[k : k + cs]:
                        continue
                    if zero:
                        yield ChunkChange(index, None, None)
                        continue
                elif zero:
                    continue
                digest = raw if raw is not None else blake3.blake3(piece).digest()
                yield ChunkChange(index, "blake3:" + digest.hex(), piece)
