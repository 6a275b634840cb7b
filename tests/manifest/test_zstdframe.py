"""manifest.zstdframe.frame_length against frames zstandard writes (raw, RLE, compressed, checksummed)."""

import os

import pytest
import zstandard

from manifest.zstdframe import FrameError, frame_length


@pytest.mark.parametrize(
    "data", [b"", b"a" * 70_000, os.urandom(200_000), os.urandom(1000) * 300], ids=["empty", "rle", "raw", "compressed"]
)
@pytest.mark.parametrize("checksum", [False, True])
def test_length_of_real_frames(data, checksum):
    frame = zstandard.ZstdCompressor(level=3, write_checksum=checksum).compress(data)
    assert frame_length(frame) == len(frame)
    assert frame_length(frame + b"trailing bytes") == len(frame)
    assert frame_length(memoryview(frame + frame)) == len(frame)


def test_truncated_and_foreign_bytes_are_refused():
    frame = zstandard.ZstdCompressor(level=3).compress(os.urandom(5000))
    with pytest.raises(FrameError, match="truncated"):
        frame_length(frame[:-1])
    with pytest.raises(FrameError, match="magic"):
        frame_length(b"PK\x03\x04" + frame)
    with pytest.raises(FrameError):
        frame_length(frame[:5])
