"""manifest.vmstate.inflate_vmstate: a vmstate bomb is refused or streamed, never inflated whole in memory."""

from __future__ import annotations

import io
import tracemalloc

import pytest
import zstandard

from manifest.digest import digest_bytes
from manifest.errors import AssemblyError, DigestMismatch
from manifest.model import FileInfo
from manifest.vmstate import MAX_VMSTATE_BYTES, inflate_vmstate

ZEROS = 256 << 20


@pytest.fixture(scope="module")
def bomb() -> bytes:
    cctx = zstandard.ZstdCompressor(level=3)
    with io.BytesIO() as sink:
        with cctx.stream_writer(sink, size=ZEROS, closefd=False) as w:
            block = bytes(1 << 20)
            for _ in range(ZEROS >> 20):
                w.write(block)
        return sink.getvalue()


def test_bomb_is_small(bomb):
    assert len(bomb) < 64 << 10


def test_a_declared_size_over_the_limit_is_refused_before_inflating(bomb):
    info = FileInfo(1 << 30, str(digest_bytes(b"")))
    with pytest.raises(AssemblyError, match="over the 536,870,912-byte vmstate limit"):
        inflate_vmstate(bomb, info, "vmstate")
    assert MAX_VMSTATE_BYTES == 512 << 20


def test_inflating_past_the_declared_size_stops_at_once(bomb):
    tracemalloc.start()
    try:
        with pytest.raises(AssemblyError, match="inflates past its declared 4,096 bytes"):
            inflate_vmstate(bomb, FileInfo(4096, str(digest_bytes(bytes(4096)))), "vmstate")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


class CountingSink:
    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


def test_a_large_honest_vmstate_streams_in_bounded_memory(bomb):
    from manifest.digest import Hasher

    h = Hasher("blake3")
    block = bytes(1 << 20)
    for _ in range(ZEROS >> 20):
        h.update(block)
    info = FileInfo(ZEROS, str(h.digest()))
    tracemalloc.start()
    try:
        sink = CountingSink()
        inflate_vmstate(bomb, info, "vmstate", sink)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.size == ZEROS
    assert peak < 8 << 20, peak


def test_wrong_content_and_trailing_bytes_are_refused():
    data = b"vmstate" * 1000
    frame = zstandard.ZstdCompressor(level=3).compress(data)
    good = FileInfo(len(data), str(digest_bytes(data)))
    sink = io.BytesIO()
    inflate_vmstate(frame, good, "vmstate", sink)
    assert sink.getvalue() == data
    with pytest.raises(DigestMismatch):
        inflate_vmstate(frame, FileInfo(len(data), str(digest_bytes(b"x"))), "vmstate")
    with pytest.raises(DigestMismatch, match="6,000 of 7,000 bytes"):
        inflate_vmstate(zstandard.ZstdCompressor().compress(data[:6000]), good, "vmstate")
    with pytest.raises(AssemblyError, match="3 bytes follow the zstd frame"):
        inflate_vmstate(frame + b"abc", good, "vmstate")
    with pytest.raises(AssemblyError, match="magic"):
        inflate_vmstate(b"not zstd at all", good, "vmstate")
