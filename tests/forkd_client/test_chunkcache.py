from __future__ import annotations

import os
from pathlib import Path

import blake3
import pytest
import zstandard

from forkd_client.chunkcache import ChunkCache
from manifest.errors import AssemblyError, DigestMismatch, InvalidDigest


def chunk(seed: int, size: int = 65536) -> tuple[str, bytes, int]:
    data = bytes([seed]) * (size // 2) + os.urandom(size // 2)
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(data)
    return "blake3:" + blake3.blake3(data).hexdigest(), frame, len(data)


def test_put_get_has_remove(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "chunks")
    digest, frame, length = chunk(1)
    assert not cache.has(digest) and cache.get_frame(digest) is None and len(cache) == 0
    assert cache.put_frame(digest, frame, length) is True
    assert cache.put_frame(digest, frame, length) is False  # already there
    assert cache.has(digest) and digest in cache
    assert cache.get_frame(digest) == frame
    hexpart = digest.split(":")[1]
    assert cache.path_for(digest) == tmp_path / "chunks" / "blake3" / hexpart[:2] / f"{hexpart}.zst"
    other, frame2, length2 = chunk(2)
    cache.put_frame(other, frame2, length2)
    assert len(cache) == 2
    assert cache.size_bytes() == len(frame) + len(frame2)
    assert sorted(cache.digests()) == sorted([digest, other])
    assert cache.remove(digest) is True and cache.remove(digest) is False
    assert len(cache) == 1 and cache.get_frame(digest) is None


def test_bad_frames_are_refused_and_leave_nothing(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "chunks")
    digest, frame, length = chunk(3)
    wrong, _, _ = chunk(4)
    with pytest.raises(DigestMismatch):
        cache.put_frame(wrong, frame, length)  # frame is not the chunk it claims to be
    with pytest.raises(AssemblyError):
        cache.put_frame(digest, frame[:-10], length)  # truncated
    with pytest.raises(AssemblyError):
        cache.put_frame(digest, frame, length - 1)  # wrong length
    assert len(cache) == 0
    leftovers = [p for p in (tmp_path / "chunks").rglob("*") if p.is_file()]
    assert leftovers == []


def test_only_blake3_digests(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "chunks")
    with pytest.raises(InvalidDigest):
        cache.has("sha256:" + "0" * 64)
    with pytest.raises(InvalidDigest):
        cache.get_frame("not-a-digest")
