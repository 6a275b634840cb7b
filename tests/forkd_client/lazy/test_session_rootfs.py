"""A lazy session of a chain whose links carry a ``rootfs.ext4``, over a real hub (in-process) and
a real FUSE mount: the head's disk is a second served file, filled on demand, every chunk
verified, and installed as a pull installs it."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from forkd_client.hub.errors import HubError
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.lazy.errors import ChunkCorrupt
from forkd_client.lazy.plan import file_links
from forkd_client.lazy.session import LazySession
from forkd_client.store import SnapshotStore
from manifest.model import ChunkMap, FileInfo, LayerConfig

from ..snapshots import make_base_source, make_link_source

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse") or os.geteuid() != 0, reason="needs /dev/fuse as root")

REF = Reference.parse("acme/disk:v1")
CS = 64 << 10
DISK = 4 << 20  # 64 chunks


def _disk(path: Path, *, seed: int, parent: bytes | None = None) -> bytes:
    """A sparse disk image: a base with data in a few clusters, or ``parent`` with some chunks
    rewritten and one zeroed (a deleted file's blocks)."""
    rng = random.Random(seed)
    data = bytearray(parent if parent is not None else bytes(DISK))
    if parent is None:
        for chunk in (0, 1, 2, 10, 11, 40, 63):
            data[chunk * CS : (chunk + 1) * CS] = rng.randbytes(CS)
    else:
        for chunk in (1, 20, 41):
            data[chunk * CS : chunk * CS + 4096] = rng.randbytes(4096)
        data[10 * CS : 11 * CS] = bytes(CS)
    with open(path, "wb") as f:
        f.truncate(DISK)
        for chunk in range(DISK // CS):
            piece = data[chunk * CS : (chunk + 1) * CS]
            if any(piece):
                f.seek(chunk * CS)
                f.write(piece)
    return bytes(data)


@pytest.fixture
def disk_chain(store: SnapshotStore, tmp_path: Path) -> SnapshotStore:
    """base <- head, each with a memory image and a disk; the head changes both."""
    base = make_base_source(tmp_path / "src-base", seed=1)
    base_disk = _disk(base / "rootfs.ext4", seed=1)
    head = make_link_source(tmp_path / "src-head", base / "memory.bin", seed=2)
    _disk(head / "rootfs.ext4", seed=2, parent=base_disk)
    store.import_snapshot(base, "base")
    store.import_snapshot(head, "head", parent="base")
    return store


def _pushed(disk_chain: SnapshotStore, inproc_hub) -> str:
    token = inproc_hub.token("ci", "push:acme/*")
    push(disk_chain, inproc_hub.client(token), "head", REF)
    return token


def test_the_heads_disk_is_served_reading_only_what_is_touched_then_installed_as_a_pull_installs_it(
    disk_chain, other_store, inproc_hub, tmp_path, monkeypatch
):
    monkeypatch.setenv("FORKD_LAZY_READAHEAD_BYTES", "0")  # count exactly what a read fetches
    token = _pushed(disk_chain, inproc_hub)
    want = (disk_chain.path("head") / "rootfs.ext4").read_bytes()
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="disk") as session:
        files = session.open()
        assert files.rootfs == files.memory.parent / "rootfs.ext4" and files.rootfs.stat().st_size == DISK
        disk = session.rootfs
        assert disk is not None and disk.plan.count == DISK // CS
        # the head's chunk 1 comes from the link, chunk 2 from the base, chunk 10 was zeroed by the link
        assert disk.plan.sources[1].layer == session.chain[1] and disk.plan.sources[2].layer == session.chain[0]
        assert disk.plan.sources[10] is None
        with open(files.rootfs, "rb") as f:
            f.seek(1 * CS + 100)
            assert f.read(8192) == want[CS + 100 : CS + 100 + 8192]
            f.seek(10 * CS)
            assert f.read(CS) == bytes(CS)  # a zero chunk: nothing fetched
        assert disk.chunks_fetched == 1 and disk.profile == [1, 10]
        assert session.image.chunks_fetched == 0  # the memory image is a file of its own
        with pytest.raises(OSError, match="Read-only file system"):
            with open(files.rootfs, "r+b") as f:
                f.write(b"x")
        result = session.fill_and_install(session.image.profile)
        assert files.rootfs.read_bytes() == want
    assert result.tag == "disk"
    with SnapshotStore(tmp_path / "plain") as plain:
        pull(plain, inproc_hub.client(token), REF, as_tag="disk")
        for a, b in zip(other_store.chain("disk"), plain.chain("disk"), strict=True):
            for role in ("memory.bin", "rootfs.ext4", "vmstate"):
                assert (a.dir / role).read_bytes() == (b.dir / role).read_bytes(), (a.tag, role)
            # the same verified record: the disk's chunk tree, proven by the pull's own check
            assert other_store.verified.cached_tree(a.dir / "rootfs.ext4") == plain.verified.cached_tree(
                b.dir / "rootfs.ext4"
            )
            assert other_store.verified.cached_tree(a.dir / "rootfs.ext4") is not None
            assert a.origin == b.origin
    assert (other_store.path("disk") / "rootfs.ext4").read_bytes() == want
    assert not session.staged.exists()  # the staged state goes once installed


def test_a_corrupt_disk_chunk_answers_eio_names_the_file_and_installs_nothing(
    disk_chain, other_store, inproc_hub, tmp_path
):
    token = _pushed(disk_chain, inproc_hub)
    for pack in [p for p in (tmp_path / "hub" / "blobs" / "packs").rglob("*") if p.is_file()]:
        raw = bytearray(pack.read_bytes())
        for at in range(0, len(raw), 997):
            raw[at] ^= 0xFF
        pack.write_bytes(bytes(raw))
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="disk") as session:
        files = session.open()
        assert files.rootfs is not None
        with open(files.rootfs, "rb") as f:
            f.seek(40 * CS)
            with pytest.raises(OSError, match="Input/output error") as caught:
                f.read(4096)
        assert caught.value.errno == 5  # never wrong bytes
        assert session.rootfs is not None and 40 in session.rootfs.failures
        assert session.image.failures == {}
        with pytest.raises(
            ChunkCorrupt, match=r"layer sha256:[0-9a-f]+: rootfs\.ext4 chunk 40 \(offset 2621440, blake3:"
        ) as raised:
            session.raise_failures()
        assert raised.value.failures[0].to_obj()["file"] == "rootfs.ext4"
        with pytest.raises(ChunkCorrupt):
            session.fill_and_install()
    assert other_store.tags() == []


def test_a_stopped_session_leaves_verified_disk_chunks_that_a_later_pull_reads_locally(
    disk_chain, other_store, inproc_hub
):
    token = _pushed(disk_chain, inproc_hub)
    want = (disk_chain.path("head") / "rootfs.ext4").read_bytes()
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="disk") as session:
        files = session.open()
        assert files.rootfs is not None and files.rootfs.read_bytes() == want  # every chunk, staged
        fetched = session.rootfs.chunks_fetched if session.rootfs else 0
    assert fetched > 0 and other_store.tags() == []
    client = inproc_hub.client(token)
    result = pull(other_store, client, REF, as_tag="disk")
    base, head = result.links
    # every disk chunk the staged head holds came from it: the link's 3 and the base's 5 that the
    # link left as they were (its chunks 1 and 10 differ from the head's); the memory was never read
    assert (head.chunks_local, base.chunks_local) == (3, 5)
    assert (other_store.path("disk") / "rootfs.ext4").read_bytes() == want


def test_whole_rootfs_mode_fetches_the_disk_before_the_session_is_ready(
    disk_chain, other_store, inproc_hub, monkeypatch
):
    monkeypatch.setenv("FORKD_LAZY_ROOTFS_WHOLE", "1")
    token = _pushed(disk_chain, inproc_hub)
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="disk") as session:
        session.open()
        disk = session.rootfs
        assert disk is not None and disk.missing == 0 and disk.profile == []
        assert session.image.chunks_fetched == 0  # the memory stays lazy


def _config(*roles: str) -> LayerConfig:
    return LayerConfig(
        "2025-01-01T00:00:00Z", {role: FileInfo(1, "blake3:" + "0" * 64) for role in ("vmstate", *roles)}
    )


def _map(parent: str | None) -> ChunkMap:
    return ChunkMap("rootfs.ext4", CS, CS, "blake3:" + "9" * 64, parent, (), ())


def test_file_links_is_the_run_of_links_that_have_the_file_as_a_pull_assembles_it() -> None:
    mem = _config("memory.bin")
    disk = _config("memory.bin", "rootfs.ext4")
    start, later = _map(None), _map("blake3:" + "1" * 64)
    # the disk appears at L1: L0 is not part of it
    links = [("L0", "r", mem, {}), ("L1", "r", disk, {"rootfs.ext4": start}), ("L2", "r", disk, {})]
    assert file_links("rootfs.ext4", links) == [("L1", "r", start), ("L2", "r", None)]
    assert [layer for layer, _, _ in file_links("memory.bin", links)] == ["L0", "L1", "L2"]
    # a link dropping the file restarts it: only what came after counts
    links = [("L0", "r", disk, {"rootfs.ext4": start}), ("L1", "r", mem, {}), ("L2", "r", disk, {"rootfs.ext4": start})]
    assert file_links("rootfs.ext4", links) == [("L2", "r", start)]
    # a map that applies to a parent file the parent does not have: refused, as a pull refuses it
    links = [("L0", "r", mem, {}), ("L1", "r", disk, {"rootfs.ext4": later})]
    with pytest.raises(HubError, match=r"layer L1: rootfs\.ext4 applies to a parent file this chain does not have"):
        file_links("rootfs.ext4", links)
    assert file_links("rootfs.ext4", [("L0", "r", mem, {})]) == []


def test_a_head_whose_disk_is_outside_its_layer_is_refused_before_anything_is_mounted(
    store, other_store, inproc_hub, tmp_path
):
    """forkd's layout may name a disk outside the snapshot (snapshot.json ``rootfs``): the layer
    carries no rootfs.ext4 for its rootfs device, so there is nothing to serve the children's disk from."""
    from forkd_client.lazy.errors import LazyUnsupported

    src = make_base_source(tmp_path / "src", seed=3)
    store.import_snapshot(src, "outside", compat={"vmm": "qemu-microvm", "deviceIds": "rootfs,net0"})
    token = inproc_hub.token("ci", "push:acme/*")
    push(store, inproc_hub.client(token), "outside", REF)
    with LazySession(other_store, inproc_hub.client(token), REF) as session:
        with pytest.raises(
            LazyUnsupported, match=r"boots a disk its layer does not carry .*forkd pull, then forkd fork"
        ):
            session.open()
        assert session.staged is None


def test_a_saved_profile_carries_the_disks_first_reads_and_the_next_session_fetches_them_first(
    disk_chain, other_store, inproc_hub, tmp_path, monkeypatch
):
    from forkd_client.hub.referrers import Document, push_referrer
    from forkd_client.lazy.profile import ARTIFACT_TYPE

    monkeypatch.setenv("FORKD_LAZY_READAHEAD_BYTES", "0")
    token = _pushed(disk_chain, inproc_hub)
    client = inproc_hub.client(token)
    with LazySession(other_store, client, REF, as_tag="disk") as first:
        files = first.open()
        assert files.rootfs is not None and first.rootfs is not None
        with open(files.rootfs, "rb") as f:
            for chunk in (40, 1, 63):
                f.seek(chunk * CS)
                f.read(100)
        assert first.rootfs.profile == [40, 1, 63]
        saved = first.save_profile()
    with SnapshotStore(tmp_path / "second") as second_store, LazySession(second_store, client, REF) as second:
        second.open()
        assert second.hub_rootfs_profile == [40, 1, 63] and second.hub_profile == []
        assert second.profile_note == f"access profile {saved} (memory.bin, rootfs.ext4)"
        assert second.wait_for_profile_head(timeout=60) and second.wait_for_working_set(timeout=60)
        disk = second.rootfs
        assert disk is not None and all(disk.present[i] for i in (40, 1, 63))
        assert disk.chunks_fetched == 3 and second.image.chunks_fetched == 0  # the working set, nothing else
        second.warm_page_cache()
        assert disk.profile == [] and disk.chunks_fetched == 3  # warming reads only what is there, records nothing
    # a newer profile whose disk document is malformed: its memory profile is used, the disk's
    # comes from the older one
    push_referrer(
        client.repository(REF.name),
        subject_digest=second.head_digest,
        subject_size=second.head_manifest_size,
        artifact_type=ARTIFACT_TYPE,
        documents=[
            Document(ARTIFACT_TYPE, b'{"file": "memory.bin", "chunkSize": 65536, "chunks": [0]}'),
            Document(ARTIFACT_TYPE, b'{"file": "rootfs.ext4", "chunkSize": 65536, "chunks": [-1]}'),
        ],
        annotations={"n": "2"},
    )
    with SnapshotStore(tmp_path / "third") as third_store, LazySession(third_store, client, REF) as third:
        third.open()
        assert third.hub_profile == [0] and third.hub_rootfs_profile == [40, 1, 63]
        assert f"{saved} (rootfs.ext4)" in third.profile_note
