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
    assert (tmp_path / "chunks" / "index.db").is_file()
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
    leftovers = [p for p in (tmp_path / "chunks" / "packs").rglob("*") if p.is_file() and p.stat().st_size]
    assert leftovers == []


def test_only_blake3_digests(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "chunks")
    with pytest.raises(InvalidDigest):
        cache.has("sha256:" + "0" * 64)
    with pytest.raises(InvalidDigest):
        cache.get_frame("not-a-digest")


def test_batches_share_one_pack_file_and_installed_packs_are_deleted(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "chunks")
    items = [chunk(i) for i in range(10, 20)]
    assert cache.put_frames(items, pack="layer-a") == 10
    assert cache.put_frames(items[:3], pack="layer-b") == 0  # already cached
    packs = sorted(p.name for p in (tmp_path / "chunks" / "packs").iterdir())
    assert packs == ["layer-a.frames"]
    assert all(cache.get_frame(d) == f for d, f, _ in items)
    assert cache.remove_many([d for d, _, _ in items[:5]]) == 5
    assert (tmp_path / "chunks" / "packs" / "layer-a.frames").exists()  # still holds 5 frames
    assert cache.remove_many([d for d, _, _ in items[5:]]) == 5
    assert list((tmp_path / "chunks" / "packs").iterdir()) == []


def test_unverified_batches_skip_the_check_only_when_asked(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path / "chunks")
    digest, frame, length = chunk(30)
    wrong, _, _ = chunk(31)
    with pytest.raises(DigestMismatch):
        cache.put_frames([(wrong, frame, length)])
    assert cache.put_frames([(digest, frame, length)], verify=False) == 1


def test_bad_pack_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pack name"):
        ChunkCache(tmp_path / "c").put_frames([chunk(40)], pack="../evil")
