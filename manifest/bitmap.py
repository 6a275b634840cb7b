"""Chunk bitmaps as a fleet host sends them: which chunks of a file it holds (docs/placement.md).

Bit ``i`` stands for chunk ``i``: byte ``i // 8``, bit ``i % 8`` (least significant first), padded with
zero bits to a whole byte. On the wire the bitmap is zlib-compressed, then base64-encoded (standard
alphabet, padded): a lazily filled 16 GiB image (262,144 chunks, 32 KiB raw) is a few KiB when its
present chunks come in runs.

Errors: :class:`BitmapError` (a ``ValueError``) naming what is wrong with a wire bitmap.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Iterator

__all__ = ["BitmapError", "decode_bitmap", "encode_bitmap", "pack_bits", "set_bits"]


class BitmapError(ValueError):
    """A wire bitmap that does not decode to exactly the bits it must hold."""


def pack_bits(count: int, present: Iterable[int]) -> bytes:
    """The raw bitmap of ``count`` bits with the bits ``present`` set. Raises ValueError for an index out of range."""
    out = bytearray((count + 7) // 8)
    for i in present:
        if not 0 <= i < count:
            raise ValueError(f"chunk {i} is outside a bitmap of {count} chunks")
        out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def set_bits(bitmap: bytes) -> Iterator[int]:
    """The indexes of the set bits of a raw bitmap, in order."""
    for byte_index, byte in enumerate(bitmap):
        if byte:
            base = byte_index << 3
            for bit in range(8):
                if byte >> bit & 1:
                    yield base + bit


def encode_bitmap(bitmap: bytes) -> str:
    """The wire form (zlib, then base64) of a raw bitmap."""
    return base64.b64encode(zlib.compress(bitmap, 9)).decode("ascii")


def decode_bitmap(text: str, count: int) -> bytes:
    """The raw bitmap of ``count`` bits a wire form holds, decompressing no more than it may hold.

    Raises BitmapError: not base64, not zlib, longer or shorter than ``(count + 7) // 8`` bytes, or a
    padding bit set.
    """
    size = (count + 7) // 8
    try:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise BitmapError("the bitmap is not base64") from None
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(packed, size + 1)  # bounded: a bomb stops one byte past the size
    except zlib.error as e:
        raise BitmapError(f"the bitmap is not zlib data: {e}") from None
    if len(raw) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise BitmapError(f"the bitmap must hold exactly {size} bytes ({count} chunks)")
    if count % 8 and raw[-1] >> (count % 8):
        raise BitmapError(f"the bitmap sets bits past its {count} chunks")
    return raw
