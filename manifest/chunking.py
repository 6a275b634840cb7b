"""Fixed-size, page-aligned chunking of file images, sparse-aware.

A file image (``memory.bin``, ``rootfs.ext4``) is cut into chunks of ``chunk_size``
bytes starting at offset 0; the last chunk may be short. 64 KiB is the default
(measured on real guest memory, see docs/decisions/0001-chunk-size.md). Chunks are
named by the blake3 digest of their exact bytes, so identical content dedups at any
offset. All-zero chunks are detected and never stored or hashed.

Errors: :class:`~manifest.errors.InvalidChunkSize`; OSError from reading files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .errors import InvalidChunkSize
from .fileops import data_ranges

DEFAULT_CHUNK_SIZE = 64 << 10
MIN_CHUNK_SIZE = 4 << 10
MAX_CHUNK_SIZE = 16 << 20
READ_BLOCK = 4 << 20  # bytes read per pread; a multiple of every valid chunk size up to 4 MiB

_ZEROS: dict[int, bytes] = {}


def validate_chunk_size(chunk_size: int) -> int:
    """Return ``chunk_size`` if it is a power of two in [4 KiB, 16 MiB], else raise InvalidChunkSize."""
    if (
        not isinstance(chunk_size, int)
        or isinstance(chunk_size, bool)
        or chunk_size < MIN_CHUNK_SIZE
        or chunk_size > MAX_CHUNK_SIZE
        or chunk_size & (chunk_size - 1)
    ):
        raise InvalidChunkSize(
            f"chunk size {chunk_size!r} must be a power of two between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE} bytes"
        )
    return chunk_size


def zeros(length: int) -> bytes:
    """A cached all-zero byte string of ``length`` bytes (for fast memcmp-based zero checks)."""
    z = _ZEROS.get(length)
    if z is None:
        z = bytes(length)
        if len(_ZEROS) < 64:
            _ZEROS[length] = z
    return z


def is_zero(data: bytes | bytearray | memoryview) -> bool:
    """True when every byte of ``data`` is zero (memcmp speed, ~16 GiB/s)."""
    return data == zeros(len(data))


@dataclass(frozen=True, slots=True)
class ChunkGeometry:
    """How a file of ``size`` bytes is cut into chunks of ``chunk_size``."""

    size: int
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def __post_init__(self) -> None:
        validate_chunk_size(self.chunk_size)
        if self.size < 0:
            raise InvalidChunkSize(f"file size {self.size} is negative")

    @property
    def count(self) -> int:
        """Number of chunks, the last one possibly short."""
        return -(-self.size // self.chunk_size)

    def offset(self, index: int) -> int:
        return index * self.chunk_size

    def length(self, index: int) -> int:
        """Length of chunk ``index`` (``chunk_size`` except for a short last chunk)."""
        if not 0 <= index < self.count:
            raise IndexError(f"chunk index {index} out of range for a {self.size}-byte file ({self.count} chunks)")
        return min(self.chunk_size, self.size - index * self.chunk_size)


def chunk_spans(ranges: Iterable[tuple[int, int]], geometry: ChunkGeometry) -> list[tuple[int, int]]:
    """Merge byte ranges into sorted, disjoint chunk-index spans ``[first, end)``.

    Ranges are clipped to the file size; each range is widened to whole chunks.
    """
    cs = geometry.chunk_size
    spans: list[tuple[int, int]] = []
    for offset, length in sorted(ranges):
        end = min(offset + length, geometry.size)
        if end <= offset:
            continue
        first, last = offset // cs, -(-end // cs)
        if spans and first <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], last))
        else:
            spans.append((first, last))
    return spans


def read_padded(fd: int, length: int, offset: int) -> bytes:
    """``pread`` exactly ``length`` bytes, padding with zeros past end of file."""
    data = os.pread(fd, length, offset)
    while 0 < len(data) < length:
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            break
        data += more
    if len(data) < length:
        data += zeros(length - len(data))
    return data


def iter_span_blocks(fd: int, span: tuple[int, int], geometry: ChunkGeometry) -> Iterator[tuple[int, bytes]]:
    """Yield ``(first_index, block)`` reads covering a chunk span, ~READ_BLOCK bytes each.

    Each block is trimmed to the file size, so the last chunk of the file is short.
    """
    cs = geometry.chunk_size
    per_block = max(1, READ_BLOCK // cs)
    first, end = span
    for start in range(first, end, per_block):
        stop = min(end, start + per_block)
        offset = start * cs
        length = min(stop * cs, geometry.size) - offset
        yield start, read_padded(fd, length, offset)


def iter_nonzero_chunks(
    path: str | os.PathLike[str], chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(index, bytes)`` for every chunk of the file that is not all zero.

    Holes are skipped without being read (``SEEK_DATA``), so the cost is the
    allocated bytes, not the apparent size.
    """
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        geometry = ChunkGeometry(os.fstat(fd).st_size, chunk_size)
        for span in chunk_spans(data_ranges(fd, geometry.size), geometry):
            for start, block in iter_span_blocks(fd, span, geometry):
                for k in range(0, len(block), chunk_size):
                    piece = block[k : k + chunk_size]
                    if not is_zero(piece):
                        yield start + k // chunk_size, piece
