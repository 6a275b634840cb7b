"""HTTP byte ranges for blob GETs: parse ``Range``, build ``multipart/byteranges`` bodies.

Errors: ``HubError(RANGE_INVALID)`` (416, with ``Content-Range: bytes */size``) for a malformed
or unsatisfiable header, ``HubError(TOO_LARGE)`` for more ranges than allowed.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable

from hub_server.errors import ErrorCode, HubError

__all__ = ["ByteRange", "multipart_body", "multipart_length", "parse_range"]

ByteRange = tuple[int, int]
"""``(first, last)``, both inclusive, as in ``Content-Range``."""


def _unsatisfiable(header: str, size: int, why: str) -> HubError:
    return HubError(
        ErrorCode.RANGE_INVALID,
        f"Range {header[:100]!r} {why} (the blob has {size} bytes)",
        {"range": header[:100], "size": size},
        headers={"Content-Range": f"bytes */{size}"},
    )


def parse_range(header: str, size: int, max_ranges: int) -> list[ByteRange]:
    """The satisfiable ranges of a ``Range: bytes=…`` header, in the order given."""
    unit, sep, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not sep or not spec.strip():
        raise _unsatisfiable(header, size, "is not a 'bytes=' range")
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) > max_ranges:
        raise HubError(
            ErrorCode.TOO_LARGE,
            f"{len(parts)} ranges in one request, the limit is {max_ranges}",
            {"limit": max_ranges, "size": len(parts)},
        )
    out: list[ByteRange] = []
    for part in parts:
        first, dash, last = part.partition("-")
        first, last = first.strip(), last.strip()
        if not dash or not (first or last) or not all(x.isdigit() for x in (first, last) if x):
            raise _unsatisfiable(header, size, f"has a malformed range {part!r}")
        if not first:  # suffix: the last N bytes
            count = int(last)
            if count and size:
                out.append((max(0, size - count), size - 1))
            continue
        start = int(first)
        end = int(last) if last else size - 1
        if end < start:
            raise _unsatisfiable(header, size, f"has a range that ends before it starts ({part!r})")
        if start < size:
            out.append((start, min(end, size - 1)))
    if not out:
        raise _unsatisfiable(header, size, "selects no byte of the blob")
    return out


def _part_head(boundary: str, content_type: str, r: ByteRange, size: int) -> bytes:
    return f"--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {r[0]}-{r[1]}/{size}\r\n\r\n".encode(
        "latin-1"
    )


def new_boundary() -> str:
    return "forkd-" + secrets.token_hex(12)


def multipart_length(boundary: str, content_type: str, ranges: list[ByteRange], size: int) -> int:
    """The exact byte length of :func:`multipart_body`'s output (for ``Content-Length``)."""
    total = len(f"--{boundary}--\r\n")
    for r in ranges:
        total += len(_part_head(boundary, content_type, r, size)) + (r[1] - r[0] + 1) + 2
    return total


async def multipart_body(
    boundary: str,
    content_type: str,
    ranges: list[ByteRange],
    size: int,
    read: Callable[[int, int], AsyncIterator[bytes]],
) -> AsyncIterator[bytes]:
    """Stream a ``multipart/byteranges`` body; ``read(offset, length)`` streams one range of the blob."""
    for r in ranges:
        yield _part_head(boundary, content_type, r, size)
        async for piece in read(r[0], r[1] - r[0] + 1):
            yield piece
        yield b"\r\n"
    yield f"--{boundary}--\r\n".encode("latin-1")
