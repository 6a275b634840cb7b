"""LayerBuilder compresses on several threads yet writes exactly what one thread would."""

from __future__ import annotations

import os
import random

import pytest
from blake3 import blake3

from manifest import layer as layer_mod
from manifest.diff import ChunkChange
from manifest.layer import LayerBuilder

CHUNK = 64 << 10


def changes(seed: int, count: int) -> list[ChunkChange]:
    """New chunks (random and text-like, so frames differ in size), zero chunks and a repeat."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i % 7 == 3:
            out.append(ChunkChange(i, None, None))
            continue
        data = rng.randbytes(CHUNK) if i % 2 else bytes(rng.choice(b"etaoin shrdlu") for _ in range(CHUNK))
        out.append(ChunkChange(i, None, data))
    out.append(ChunkChange(count, None, out[1].data))  # the same content again: referenced, not stored
    return [
        ChunkChange(c.index, None if c.data is None else "blake3:" + blake3(c.data).hexdigest(), c.data) for c in out
    ]


def build(tmp_path, name: str, threads: int, items: list[ChunkChange], **kw):
    builder = LayerBuilder(tmp_path / name, threads=threads, **kw)
    builder.add_file(
        "memory.bin",
        items,
        size=(len(items) + 1) * CHUNK,
        chunk_size=CHUNK,
        digest="blake3:" + "1" * 64,
        parent_digest=None,
    )
    maps, blobs = builder.finish()
    return maps["memory.bin"].to_json(), [(b.digest, b.path.read_bytes()) for b in blobs], builder.stats


@pytest.mark.parametrize("window", [1, 3, layer_mod.COMPRESS_WINDOW])
def test_threads_change_nothing_in_the_output(tmp_path, monkeypatch, window):
    monkeypatch.setattr(layer_mod, "COMPRESS_WINDOW", window)
    items = changes(7, 150)
    one = build(tmp_path, "one", 1, items)
    four = build(tmp_path, "four", 4, items)
    assert one[0] == four[0]  # chunk maps
    assert one[1] == four[1]  # blob digests and bytes
    assert one[2] == four[2]  # stats
    assert four[2].reused_chunks == 1 and four[2].zero_chunks == sum(c.data is None for c in items)


def test_blobs_split_at_the_size_limit_in_order(tmp_path):
    items = changes(9, 60)
    one = build(tmp_path, "one", 1, items, max_blob_bytes=1 << 20)
    four = build(tmp_path, "four", 4, items, max_blob_bytes=1 << 20)
    assert len(four[1]) > 1 and one[1] == four[1] and one[0] == four[0]


def test_a_failing_source_leaves_no_half_built_layer_behind(tmp_path):
    def broken():
        yield from changes(3, 20)
        raise OSError("read error")

    builder = LayerBuilder(tmp_path / "b", threads=4)
    with pytest.raises(OSError, match="read error"):
        builder.add_file(
            "memory.bin", broken(), size=21 * CHUNK, chunk_size=CHUNK, digest="blake3:" + "1" * 64, parent_digest=None
        )
    assert not builder._inflight  # nothing left compressing
    assert all(name.endswith(".partial") for name in os.listdir(tmp_path / "b"))  # no blob was finished
    builder.abort()
    assert os.listdir(tmp_path / "b") == []


def test_a_file_digest_may_come_after_its_chunks_but_must_come(tmp_path):
    """A push learns a file's chunk tree from the same pass that feeds the builder: the digest is
    given after the chunks (``set_digest``); a builder never finishes a map without one."""
    items = changes(5, 6)
    late = LayerBuilder(tmp_path / "late", threads=2)
    late.add_file("memory.bin", items, size=8 * CHUNK, chunk_size=CHUNK, digest=None, parent_digest=None)
    late.set_digest("memory.bin", "blake3:" + "ab" * 32)
    maps, _ = late.finish()
    assert maps["memory.bin"].digest == "blake3:" + "ab" * 32

    missing = LayerBuilder(tmp_path / "missing", threads=2)
    missing.add_file("memory.bin", items, size=8 * CHUNK, chunk_size=CHUNK, digest=None, parent_digest=None)
    with pytest.raises(layer_mod.AssemblyError, match=r"memory\.bin"):
        missing.finish()
    missing.abort()
    assert not list((tmp_path / "missing").glob(".blob-*"))  # nothing half-written left
    with pytest.raises(layer_mod.AssemblyError, match=r"rootfs\.ext4"):
        missing.set_digest("rootfs.ext4", "blake3:" + "ab" * 32)
