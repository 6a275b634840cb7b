"""The pure verification helpers: frame planning and coalescing, chunk map checks, shared bytes."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest

from hub_server.errors import HubError
from hub_server.registry.core.paths import blob_key
from hub_server.registry.push.verify import (
    FrameCheck,
    _runs,
    check_chunk_map,
    plan_frames,
    shared_bytes,
    verify_frames,
)
from hub_server.storage.memory import MemoryStore
from manifest import mediatypes as mt
from manifest.model import Descriptor, FileInfo, LayerConfig
from tests.manifest.images import mutate_image, random_image
from tests.manifest.layers import build_layer

MiB = 1 << 20


@pytest.fixture
def layer(tmp_path):
    rng = random.Random(7)
    base = random_image(tmp_path / "base.bin", rng, 2 * MiB)
    child = mutate_image(base, tmp_path / "child.bin", rng)
    chunk_map, blobs, _ = build_layer(base, child, tmp_path / "blobs")
    return chunk_map, blobs[0]


def test_plan_frames_is_sorted_and_distinct(layer):
    chunk_map, _blob = layer
    doubled = replace(chunk_map, file=mt.ROOTFS_FILE)  # the same frames, seen from a second file
    checks = plan_frames([chunk_map, doubled])
    data_entries = [e for e in chunk_map.entries if e.digest]
    assert len(checks) == len({(e.offset, e.length) for e in data_entries})
    assert [c.offset for c in checks] == sorted(c.offset for c in checks)


def test_runs_coalesce_neighbours_but_not_blobs():
    a = [FrameCheck("b1", o, 100, "d", 10, "memory.bin", i) for i, o in enumerate((0, 100, 200, 50_000_000))]
    b = [FrameCheck("b2", 0, 100, "d", 10, "memory.bin", 9)]
    runs = _runs([*a, *b])
    assert [[c.index for c in run] for run in runs] == [[0, 1, 2], [3], [9]]


def test_verify_frames_reads_back_and_checks_every_frame(layer):
    chunk_map, blob = layer
    data = blob.path.read_bytes()
    checks = plan_frames([chunk_map])

    async def run(raw: bytes):
        store = MemoryStore()
        await store.put(blob_key(blob.digest), raw)

        async def read(digest: str, offset: int, length: int) -> bytes:
            return await store.read(blob_key(digest), offset, length)

        await verify_frames(read, checks, {blob.digest: len(raw)})

    asyncio.run(run(data))
    victim = checks[len(checks) // 2]
    broken = bytearray(data)
    broken[victim.offset + 20] ^= 0x55
    with pytest.raises(HubError) as e:
        asyncio.run(run(bytes(broken)))
    assert e.value.code == "DIGEST_INVALID" and e.value.detail["chunk"] == victim.index
    with pytest.raises(HubError) as e:
        asyncio.run(run(data[: victim.offset]))  # the blob ends before the frame
    assert e.value.code == "MANIFEST_INVALID"


def test_check_chunk_map_against_config_and_parent(layer):
    chunk_map, blob = layer
    desc = Descriptor(mt.CHUNK_MAP, "blake3:" + "c" * 64, 1, {mt.ANNOTATION_FILE: mt.MEMORY_FILE})
    files = {
        mt.VMSTATE_FILE: FileInfo(1, "blake3:" + "d" * 64),
        mt.MEMORY_FILE: FileInfo(chunk_map.size, chunk_map.digest, None, chunk_map.chunk_size),
    }
    parent = LayerConfig(
        "t", {mt.VMSTATE_FILE: files[mt.VMSTATE_FILE], mt.MEMORY_FILE: FileInfo(1, chunk_map.parent_digest)}
    )
    config = LayerConfig("t", files)
    check_chunk_map(chunk_map, desc, config, parent, {blob.digest})
    bad_cases = [
        ({"data_blobs": set()}, "blobs"),
        ({"parent": None}, "parentDigest"),
        ({"config": LayerConfig("t", {**files, mt.MEMORY_FILE: FileInfo(1, chunk_map.digest)})}, "digest"),
        ({"desc": replace(desc, annotations={mt.ANNOTATION_FILE: mt.ROOTFS_FILE})}, "file"),
    ]
    for change, field in bad_cases:
        args = {"desc": desc, "config": config, "parent": parent, "data_blobs": {blob.digest}, **change}
        with pytest.raises(HubError) as e:
            check_chunk_map(chunk_map, args["desc"], args["config"], args["parent"], args["data_blobs"])
        assert e.value.code == "MANIFEST_INVALID" and e.value.detail["field"] == field


def test_shared_bytes(layer):
    chunk_map, _ = layer
    changed = sum(min(chunk_map.chunk_size, chunk_map.size - e.index * chunk_map.chunk_size) for e in chunk_map.entries)
    parent = LayerConfig("t", {mt.MEMORY_FILE: FileInfo(1, "blake3:" + "e" * 64)})
    assert shared_bytes([chunk_map], parent) == chunk_map.size - changed
    assert shared_bytes([chunk_map], None) == 0
