"""Chunk bitmaps on the wire (manifest/bitmap.py): round trips, and every malformed form refused before it costs memory."""

from __future__ import annotations

import base64
import zlib

import pytest

from manifest.bitmap import BitmapError, decode_bitmap, encode_bitmap, pack_bits, set_bits


@pytest.mark.parametrize("count", [1, 7, 8, 9, 64, 1000])
def test_bits_round_trip(count: int) -> None:
    present = [i for i in range(count) if i % 3 == 0 or i == count - 1]
    raw = pack_bits(count, present)
    assert len(raw) == (count + 7) // 8
    assert list(set_bits(raw)) == present
    assert decode_bitmap(encode_bitmap(raw), count) == raw


def test_bit_order_is_least_significant_first() -> None:
    assert pack_bits(10, [0, 9]) == bytes([0b0000_0001, 0b0000_0010])


def test_an_index_outside_the_bitmap_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk 8 is outside a bitmap of 8 chunks"):
        pack_bits(8, [8])


def test_a_run_of_present_chunks_is_small_on_the_wire() -> None:
    count = 262_144  # a 16 GiB image of 64 KiB chunks
    wire = encode_bitmap(pack_bits(count, range(1000, 200_000)))
    assert len(wire) < 1000


@pytest.mark.parametrize(
    ("wire", "count", "message"),
    [
        ("not base64!", 8, "not base64"),
        (base64.b64encode(b"plain").decode(), 8, "not zlib"),
        (base64.b64encode(zlib.compress(b"\x01\x02")).decode(), 8, "exactly 1 bytes"),
        (base64.b64encode(zlib.compress(b"")).decode(), 8, "exactly 1 bytes"),
        (base64.b64encode(zlib.compress(b"\xff")).decode(), 5, "past its 5 chunks"),
        (base64.b64encode(zlib.compress(b"\x01") + b"junk").decode(), 8, "exactly 1 bytes"),
    ],
)
def test_malformed_wire_bitmaps_are_refused(wire: str, count: int, message: str) -> None:
    with pytest.raises(BitmapError, match=message):
        decode_bitmap(wire, count)


def test_a_decompression_bomb_stops_at_the_size_it_may_hold() -> None:
    bomb = base64.b64encode(zlib.compress(bytes(64 << 20))).decode()  # 64 MiB of zeros, ~64 KiB on the wire
    with pytest.raises(BitmapError, match="exactly 1 bytes"):
        decode_bitmap(bomb, 8)
