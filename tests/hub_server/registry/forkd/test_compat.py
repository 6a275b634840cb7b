"""forkd packs built from stored layers: naming, byte stability, rootfs, limits, damage, pruning."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import random
from pathlib import Path

import anyio.to_thread
import pytest
import zstandard

from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core import paths
from hub_server.registry.forkd.compat import (
    PACKS_PREFIX,
    ForkdCompatService,
    forkd_time,
    link_names,
    pack_info_key,
    pack_key,
)
from hub_server.registry.forkd.packbuild import StoreFrames
from hub_server.storage import validate_key
from manifest import mediatypes as mt
from manifest.chunktree import file_chunk_tree
from manifest.diff import diff_files
from manifest.digest import digest_bytes, digest_file
from manifest.forkd_pack import is_safe_pack_tag, is_valid_cli_tag
from manifest.forkd_unpack import read_pack
from manifest.layer import LayerBuilder
from manifest.model import Descriptor, FileInfo, LayerConfig, LayerManifest, ParentRef
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import CHUNK, CREATED, MiB, auth, damage_stored_byte
from tests.manifest.images import mutate_image, random_image, same_bytes

HEX = "ab" * 32


def config(parent_tag: str | None = None, created: str = CREATED) -> LayerConfig:
    files = {mt.VMSTATE_FILE: FileInfo(1, "blake3:" + HEX), mt.MEMORY_FILE: FileInfo(MiB, "blake3:" + HEX)}
    parent = ParentRef("blake3:" + HEX, parent_tag) if parent_tag is not None else None
    return LayerConfig(created, files, parent)


def service(hub: Hub, **kwargs) -> ForkdCompatService:
    return ForkdCompatService(hub.registry.ctx, hub.settings.data_dir / "tmp", **kwargs)


def pack_bytes(hub: Hub, forkd: ForkdCompatService, repo: str, ref: str, principal=None) -> bytes:
    ns, name = repo.split("/")
    scope = hub.call(hub.registry.scope, principal or Principal.anonymous(), ns, name, "pull")
    pack = hub.call(forkd.pack, scope, ref)
    return hub.call(hub.registry.ctx.store.read, pack.key)


def unpack(data: bytes, staging: Path):
    staging.mkdir(parents=True)
    return read_pack(io.BytesIO(data), staging)


def push_then_publish(hub: Hub, admin: str, images, workdir: Path, tag: str = "head"):
    """``images`` pushed to acme/vm as a chain tagged ``tag``, the repository made public only then: a tag pushed
    to a public repository has its pack built at once (after the push's answer), and these tests build it."""
    layers = hub.pusher(admin).push_chain("acme/vm", images, workdir, tag)
    assert (
        hub.client.patch("/api/v1/repositories/acme/vm", json={"public": True}, headers=auth(admin)).status_code == 200
    )
    return layers


def stored_pack_keys(hub: Hub) -> list[str]:
    async def keys() -> list[str]:
        return [k async for k in hub.registry.ctx.store.list(PACKS_PREFIX)]

    return hub.call(keys)


# -- names and times ------------------------------------------------------------------------


def test_link_names_come_from_parent_tags_then_the_repository():
    d = [f"blake3:{i:02x}" + "0" * 62 for i in range(4)]
    chain = [(d[0], config()), (d[1], config("py-base")), (d[2], config(None)), (d[3], config("py.numpy 2"))]
    # link 0 is named by link 1's parent tag, link 1 by link 2's (none: repo + digest), link 2 by link 3's
    assert link_names("py.app", chain) == ["py-base", "py-app-010000000000", "py-numpy-2", "py-app"]
    assert link_names("vm", [(d[0], config())]) == ["vm"]


def test_link_names_are_forkd_safe_and_unique():
    d = [f"blake3:{i:02x}" + "0" * 62 for i in range(3)]
    long = "x" * 80
    names = link_names("vm", [(d[0], config()), (d[1], config("vm")), (d[2], config("vm"))])
    assert names == ["vm", "vm-2", "vm-3"]
    names = link_names(long[:64], [(d[0], config()), (d[1], config("---" + long))])
    assert names == ["x" * 64, "x" * 62 + "-2"]
    assert link_names("a", [(d[0], config()), (d[1], config("!!!"))])[0] == "a-000000000000"
    for name in names:
        assert is_safe_pack_tag(name) and is_valid_cli_tag(name)


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
        ("2026-03-04T05:06:07.891+02:00", "2026-03-04T03:06:07Z"),
        ("2026-03-04T05:06:07", "2026-03-04T05:06:07Z"),
        ("yesterday", "1970-01-01T00:00:00Z"),
        ("1900-01-01T00:00:00Z", "1970-01-01T00:00:00Z"),
    ],
)
def test_forkd_time(created, expected):
    assert forkd_time(created) == expected


def test_cache_keys_are_valid_and_documented():
    key = pack_key("acme/py.numpy", "blake3:" + HEX)
    assert key == f"forkd-packs/acme/py.numpy/blake3-{HEX}.forkd-snapshot.tar.zst"
    assert pack_info_key("acme/py.numpy", "blake3:" + HEX) == f"forkd-packs/acme/py.numpy/blake3-{HEX}.json"
    assert validate_key(key) == key
    assert "forkd-packs/<ns>/<repo>/<alg>-<hex>" in paths.__doc__


# -- building packs ---------------------------------------------------------------------------


def test_packs_are_built_once_and_rebuilt_byte_identical(hub: Hub, images, tmp_path):
    layers = push_then_publish(hub, hub.token("admin", "admin"), images, tmp_path / "p")
    forkd = service(hub)
    first = pack_bytes(hub, forkd, "acme/vm", "head")
    assert stored_pack_keys(hub) == [
        pack_key("acme/vm", layers[-1].digest),
        pack_info_key("acme/vm", layers[-1].digest),
    ]
    assert pack_bytes(hub, forkd, "acme/vm", f"@{layers[-1].digest}") == first  # served from the cache

    for key in stored_pack_keys(hub):  # lose the cache: a rebuild gives the very same bytes
        hub.call(hub.registry.ctx.store.delete, key)
    assert pack_bytes(hub, service(hub), "acme/vm", "head") == first

    unpacked = unpack(first, tmp_path / "s")
    assert unpacked.version == 2 and len(unpacked.links) == 3
    assert unpacked.created_at == CREATED
    for link, (memory, vmstate) in zip(unpacked.links, images, strict=True):
        assert same_bytes(link.directory / "memory.bin", memory)
        assert (link.directory / "vmstate").read_bytes() == vmstate
    assert list((hub.settings.data_dir / "tmp").iterdir()) == []  # work dirs are removed


def test_concurrent_requests_build_a_pack_once(hub: Hub, images, tmp_path, caplog):
    push_then_publish(hub, hub.token("admin", "admin"), images, tmp_path / "p")
    forkd = service(hub)

    async def together() -> list:
        scope = await hub.registry.scope(Principal.anonymous(), "acme", "vm", "pull")
        return await asyncio.gather(*(forkd.pack(scope, "head") for _ in range(3)))

    with caplog.at_level(logging.INFO, logger="hub_server.registry.forkd.compat"):
        packs = hub.call(together)
    assert len({(p.key, p.sha256, p.size) for p in packs}) == 1
    assert sum("built the forkd pack" in r.getMessage() for r in caplog.records) == 1


def test_a_rootfs_and_config_metadata_reach_the_pack(hub: Hub, tmp_path):
    """Layers with rootfs.ext4: both files assembled; parent tag, description and base image carried over."""
    rng = random.Random(7)
    mem0 = random_image(tmp_path / "mem0", rng, 2 * MiB)
    root0 = random_image(tmp_path / "root0", rng, 3 * MiB)
    mem1 = mutate_image(mem0, tmp_path / "mem1", rng)
    root1 = mutate_image(root0, tmp_path / "root1", rng, new_size=4 * MiB)
    pusher = hub.pusher(hub.token("admin", "admin"))
    base = push_rootfs_layer(pusher, "acme/py", mem0, root0, b"vm0", tmp_path / "b", None, tag="base")
    push_rootfs_layer(
        pusher, "acme/py", mem1, root1, b"vm1", tmp_path / "c", (base, "py-base", mem0, root0), tag="numpy"
    )

    unpacked = unpack(pack_bytes(hub, service(hub), "acme/py", "numpy", admin_principal()), tmp_path / "s")
    assert [link.tag for link in unpacked.links] == ["py-base", "py"]
    assert unpacked.description == "numpy on top" and unpacked.base_image == "python:3.12-slim"
    for link, (memory, rootfs, vmstate) in zip(
        unpacked.links, [(mem0, root0, b"vm0"), (mem1, root1, b"vm1")], strict=True
    ):
        assert same_bytes(link.directory / "memory.bin", memory)
        assert same_bytes(link.directory / "rootfs.ext4", rootfs)
        assert (link.directory / "vmstate").read_bytes() == vmstate
        assert [f.path for f in link.files] == ["snapshot.json", "vmstate", "rootfs.ext4", "memory.bin"]
    assert unpacked.links[1].parent_content_hash == hashlib.sha256(mem0.read_bytes()).hexdigest()

    base_only = unpack(pack_bytes(hub, service(hub), "acme/py", "base", admin_principal()), tmp_path / "s1")
    assert base_only.version == 1 and base_only.links[0].tag == "py"


def admin_principal() -> Principal:
    return Principal.with_scopes("admin", ["admin"])


def push_rootfs_layer(
    pusher,
    repo: str,
    memory: Path,
    rootfs: Path,
    vmstate: bytes,
    workdir: Path,
    parent: tuple[str, str, Path, Path] | None,
    *,
    tag: str,
) -> str:
    """Build and push a layer carrying memory.bin and rootfs.ext4; returns its manifest digest."""
    builder = LayerBuilder(workdir / "blobs")
    files = {mt.VMSTATE_FILE: FileInfo(len(vmstate), str(digest_bytes(vmstate)), str(digest_bytes(vmstate, "sha256")))}
    for role, path, parent_path in (
        (mt.MEMORY_FILE, memory, parent and parent[2]),
        (mt.ROOTFS_FILE, rootfs, parent and parent[3]),
    ):
        tree = file_chunk_tree(path, CHUNK)
        builder.add_file(
            role,
            diff_files(parent_path, path, CHUNK),
            size=os.path.getsize(path),
            chunk_size=CHUNK,
            digest=tree,
            parent_digest=file_chunk_tree(parent_path, CHUNK) if parent_path else None,
        )
        files[role] = FileInfo(os.path.getsize(path), tree, str(digest_file(path, ("sha256",))["sha256"]), CHUNK)
    maps, blobs = builder.finish()
    annotations = {mt.ANNOTATION_DESCRIPTION: "numpy on top", mt.ANNOTATION_BASE_IMAGE: "python:3.12-slim"}
    config_bytes = LayerConfig(
        "2026-02-03T04:05:06Z",
        files,
        ParentRef(parent[0], parent[1]) if parent else None,
        {"vmm": "qemu-microvm", "memMiB": 2},
        annotations,
    ).to_json()
    vm_blob = zstandard.ZstdCompressor(write_content_size=True).compress(vmstate)
    small = {config_bytes, vm_blob, *(m.to_json() for m in maps.values())}
    sizes = {b.digest: b.size for b in blobs}
    layers = [Descriptor.for_bytes(mt.VMSTATE, vm_blob)]
    layers += [
        Descriptor.for_bytes(mt.CHUNK_MAP, maps[r].to_json(), **{mt.ANNOTATION_FILE: r})
        for r in (mt.MEMORY_FILE, mt.ROOTFS_FILE)
    ]
    layers += [
        Descriptor(mt.DATA_BLOB, d, sizes[d])
        for d in dict.fromkeys(d for r in (mt.MEMORY_FILE, mt.ROOTFS_FILE) for d in maps[r].blobs)
    ]
    manifest = LayerManifest(Descriptor.for_bytes(mt.CONFIG, config_bytes), tuple(layers)).to_json()
    for blob in blobs:
        if not pusher.blob_exists(repo, blob.digest):
            pusher.push_recipe(repo, blob)
    for data in small:
        pusher.ensure_blob(repo, data, str(digest_bytes(data, "sha256")))
    pusher.put_manifest(repo, tag, manifest)
    return str(digest_bytes(manifest, "sha256"))


def test_frames_are_read_a_window_at_a_time(hub: Hub, images, tmp_path):
    layer = hub.pusher(hub.token("admin", "admin")).push_chain("acme/vm", images[:1], tmp_path / "p", "v1")[0]
    blob = next(iter(layer.data_blobs))
    data = layer.data_blobs[blob].read_bytes()
    frames = StoreFrames(hub.registry.ctx, window=64 * 1024, keep=1)
    entries = [e for e in layer.chunk_map.entries if e.digest is not None]

    def read_all() -> list[bytes]:
        return [frames(blob, e.offset, e.length) for e in entries]

    got = hub.call(anyio.to_thread.run_sync, read_all)
    assert got == [data[e.offset : e.offset + e.length] for e in entries]
    assert 0 < frames.reads < len(entries)  # adjacent frames share one read


def test_a_pack_over_the_limit_is_refused(hub: Hub, images, tmp_path):
    layers = push_then_publish(hub, hub.token("admin", "admin"), images, tmp_path / "p")
    with pytest.raises(HubError) as caught:
        pack_bytes(hub, service(hub, max_pack_bytes=8 * MiB), "acme/vm", "head")
    assert caught.value.code is ErrorCode.TOO_LARGE and caught.value.detail["limit"] == 8 * MiB
    assert caught.value.detail["size"] > 8 * MiB
    assert stored_pack_keys(hub) == []
    # the limit counts every file of every link: the base alone (4 MiB + its vmstate) fits
    assert pack_bytes(hub, service(hub, max_pack_bytes=4 * MiB + 2000), "acme/vm", layers[0].digest)


def test_a_damaged_chunk_fails_the_build_and_caches_nothing(hub: Hub, images, tmp_path):
    layers = push_then_publish(hub, hub.token("admin", "admin"), images[:2], tmp_path / "p")
    victim = next(e for e in layers[1].chunk_map.entries if e.digest is not None)
    blob = layers[1].chunk_map.blobs[victim.blob]
    # the frame's last byte: its content (or its framing), where the hub stores it (its pack)
    hub.call(damage_stored_byte, hub.registry.ctx, blob, victim.offset + victim.length - 1)

    with pytest.raises(HubError) as caught:
        pack_bytes(hub, service(hub), "acme/vm", "head")
    assert caught.value.code is ErrorCode.INTERNAL
    assert f"chunk {victim.index}" in caught.value.message and "memory.bin" in caught.value.message
    assert stored_pack_keys(hub) == []
    assert list((hub.settings.data_dir / "tmp").iterdir()) == []


def test_a_damaged_build_is_marked_once_and_refused_from_the_mark(hub: Hub, images, tmp_path, caplog):
    """Issue 16 item 1: failures are cached too; the mark outlives a repair until it is cleared."""
    from hub_server.registry.content.damage import clear_marks, list_marks

    layers = push_then_publish(hub, hub.token("admin", "admin"), images[:2], tmp_path / "p")
    victim = next(e for e in layers[1].chunk_map.entries if e.digest is not None)
    blob = layers[1].chunk_map.blobs[victim.blob]
    hub.call(damage_stored_byte, hub.registry.ctx, blob, victim.offset)
    forkd = service(hub)

    async def together() -> list:
        scope = await hub.registry.scope(Principal.anonymous(), "acme", "vm", "pull")
        return await asyncio.gather(*(forkd.pack(scope, "head") for _ in range(3)), return_exceptions=True)

    with caplog.at_level(logging.INFO, logger="hub_server.registry.forkd.compat"):
        answers = [*hub.call(together), hub.call(together)[0]]
    assert all(isinstance(a, HubError) and a.code is ErrorCode.INTERNAL and a.detail["damaged"] for a in answers)
    assert all(f"chunk {victim.index}" in a.message for a in answers)  # the mark keeps the reason
    assert sum("cannot build the forkd pack" in r.getMessage() for r in caplog.records) == 1  # built once
    marks = hub.call(list_marks, hub.registry.ctx)
    assert [(m.key, m.kind) for m in marks] == [(pack_key("acme/vm", layers[1].digest), "forkd-pack")]
    assert stored_pack_keys(hub) == []

    hub.call(damage_stored_byte, hub.registry.ctx, blob, victim.offset)  # repaired: the mark still answers
    with pytest.raises(HubError):
        pack_bytes(hub, forkd, "acme/vm", "head")
    assert hub.call(clear_marks, hub.registry.ctx) == 1
    assert pack_bytes(hub, forkd, "acme/vm", "head")  # built now


def test_prune_removes_packs_of_manifests_gone_from_their_repository(hub: Hub, images, tmp_path):
    admin = hub.token("admin", "admin")
    layers = push_then_publish(hub, admin, images[:2], tmp_path / "p")
    hub.pusher(admin).put_manifest("acme/vm", "base", layers[0].manifest)
    forkd = service(hub)
    pack_bytes(hub, forkd, "acme/vm", "head")
    pack_bytes(hub, forkd, "acme/vm", "base")
    assert hub.call(forkd.prune) == []
    assert len(stored_pack_keys(hub)) == 4

    assert hub.client.delete("/v2/acme/vm/manifests/head", headers=auth(admin)).status_code == 202
    pruned = hub.call(forkd.prune)
    assert sorted(pruned) == sorted([pack_key("acme/vm", layers[1].digest), pack_info_key("acme/vm", layers[1].digest)])
    assert sorted(stored_pack_keys(hub)) == sorted(
        [pack_key("acme/vm", layers[0].digest), pack_info_key("acme/vm", layers[0].digest)]
    )


def test_garbage_collection_prunes_packs_of_deleted_manifests(hub: Hub, images, tmp_path):
    from hub_server.registry.upkeep.gc import GarbageCollector

    admin = hub.token("admin", "admin")
    layers = push_then_publish(hub, admin, images[:2], tmp_path / "p")
    forkd = service(hub)
    pack_bytes(hub, forkd, "acme/vm", "head")
    assert hub.client.delete("/v2/acme/vm/manifests/head", headers=auth(admin)).status_code == 202
    gc = GarbageCollector(hub.registry.ctx)
    dry = hub.call(lambda: gc.run(dry_run=True))
    assert sorted(dry.packs) == sorted(
        [pack_key("acme/vm", layers[1].digest), pack_info_key("acme/vm", layers[1].digest)]
    )
    assert len(stored_pack_keys(hub)) == 2  # a dry run deletes nothing
    report = hub.call(lambda: gc.run())
    assert sorted(report.packs) == sorted(dry.packs)
    assert stored_pack_keys(hub) == []


def test_a_false_sha256_is_assembled_once_per_layer_not_once_per_chain(make_hub, images, tmp_path, caplog):
    """Issue 27, item 5: a layer whose memory.bin sha256 is false (its chunk-tree digest right) made every
    chain holding it, in every repository, assemble it again before failing. Now the first failure marks
    the layer, and every other chain holding it is refused from that mark. (A push refuses such a layer
    (tests/hub_server/registry/push/test_filesha.py); the hub here does not check, as one holding layers
    pushed before that check, or one of trusted pushers (FORKD_HUB_FILE_SHA256_CHECKS=0).)"""
    import json
    from dataclasses import replace

    from hub_server.settings import Limits

    hub = make_hub(limits=replace(Limits(), file_sha256_checks=0))
    from hub_server.registry.content.damage import list_marks
    from hub_server.registry.forkd.compat import link_mark_key

    pusher = hub.pusher(hub.token("admin", "admin"))
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    obj = json.loads(layer.config)
    obj["files"][mt.MEMORY_FILE]["sha256"] = "sha256:" + "0" * 64
    false = layer.rebuild(config=json.dumps(obj).encode())
    pusher.push_layer("acme/vm", false, "a", public=True)
    pusher.push_layer("acme/copy", false, "b", public=True, mount_from="acme/vm")
    forkd = service(hub)
    with caplog.at_level(logging.INFO, logger="hub_server.registry.forkd.compat"):
        for repo, tag in (("acme/vm", "a"), ("acme/copy", "b"), ("acme/copy", "b")):
            with pytest.raises(HubError) as caught:
                pack_bytes(hub, forkd, repo, tag)
            assert caught.value.code is ErrorCode.INTERNAL and "memory.bin" in caught.value.message
    # assembled once: the assembly's failure is logged once ("marked damaged"); the build after each push and
    # every later request are refused from the marks (their warnings quote the refusal, not a new assembly)
    assert sum("(marked damaged)" in r.getMessage() for r in caplog.records) == 1
    marks = {m.key: m.kind for m in hub.call(list_marks, hub.registry.ctx)}
    assert marks[link_mark_key(false.digest)] == "forkd-link"
