"""Where a zstd frame ends: its compressed length, read from its block headers.

``zstandard``'s one-shot ``decompress`` stops at the end of the first frame and ignores what
follows, so bytes appended after a chunk's frame inside its chunk-map entry would be stored,
served and never verified. :func:`frame_length` walks the frame header and block headers
(RFC 8878 §3.1.1) without decompressing, which costs a few microseconds per chunk, so callers
can insist that a frame spans its entry exactly.
"""

from __future__ import annotations

import zstandard

__all__ = ["FrameError", "frame_length"]

_MAGIC = b"\x28\xb5\x2f\xfd"
_RLE_BLOCK, _RESERVED_BLOCK = 1, 3


class FrameError(ValueError):
    """The bytes do not start with one well-formed zstd frame header and block sequence."""


def frame_length(buf: bytes | bytearray | memoryview) -> int:
    """The number of bytes of the zstd frame at the start of ``buf`` (header, blocks, checksum).

    Raises: FrameError (not a zstd frame, a reserved block type, or the frame runs past ``buf``).
    """
    view = memoryview(buf)
    if bytes(view[:4]) != _MAGIC:
        raise FrameError("not a zstd frame (bad magic number)")
    try:
        pos = zstandard.frame_header_size(bytes(view[:18]))
    except zstandard.ZstdError as e:
        raise FrameError(f"bad zstd frame header: {e}") from None
    has_checksum = bool(view[4] & 0x04)
    while True:
        if pos + 3 > len(view):
            raise FrameError("the zstd frame is truncated (block header missing)")
        header = int.from_bytes(view[pos : pos + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == _RESERVED_BLOCK:
            raise FrameError(f"reserved zstd block type at byte {pos}")
        pos += 3 + (1 if kind == _RLE_BLOCK else size)
        if last:
            break
    if has_checksum:
        pos += 4
    if pos > len(view):
        raise FrameError(f"the zstd frame is truncated (needs {pos} bytes, has {len(view)})")
    return pos
