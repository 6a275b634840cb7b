"""Chains made by ``pull`` work in forkd's own daemon, byte for byte (issue 11).

The links zero memory their parent held, grow and shrink it: forkd's spawn-time image
(tests/forkd_daemon.py) must equal each pulled link's own memory.bin.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from forkd_client.hub.forkd_registry import pull_from_registry
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from manifest.holes import unsafe_holes

from ...forkd_daemon import ForkdDaemon, ForkdError, assert_forkd_sees_every_link
from ..snapshots import make_base_source, make_zeroing_link


def test_pulled_links_that_zero_parent_memory_assemble_right_in_forkd(store, other_store, inproc_hub, tmp_path):
    base = make_base_source(tmp_path / "src-base", seed=1)
    one = make_zeroing_link(tmp_path / "src-1", base / "memory.bin", seed=2)
    two = make_zeroing_link(tmp_path / "src-2", one / "memory.bin", seed=3)
    store.import_snapshot(base, "base")
    store.import_snapshot(one, "zero1", parent="base")
    store.import_snapshot(two, "zero2", parent="zero1")
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(store, client, "zero2", Reference.parse("acme/z:v1"))
    pull(other_store, client, Reference.parse("acme/z:v1"), as_tag="z")
    tags = [s.tag for s in other_store.chain("z")]
    assert_forkd_sees_every_link(other_store.snapshots_dir, tags, tmp_path / "work")
    for parent, child in itertools.pairwise(tags):
        assert unsafe_holes(other_store.path(child) / "memory.bin", other_store.path(parent) / "memory.bin") == []


@pytest.mark.parametrize("factor", [2, 0.5], ids=["grow", "shrink"])
def test_pulled_links_that_resize_memory(store, other_store, inproc_hub, tmp_path, factor):
    base = make_base_source(tmp_path / "src-base", seed=1)
    size = int(os.path.getsize(base / "memory.bin") * factor)
    link = make_zeroing_link(tmp_path / "src-link", base / "memory.bin", seed=4, size=size)
    store.import_snapshot(base, "base")
    store.import_snapshot(link, "resized", parent="base")
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(store, client, "resized", Reference.parse("acme/r:v1"))
    pull(other_store, client, Reference.parse("acme/r:v1"), as_tag="r")
    with pytest.raises(ForkdError, match="size mismatch"):  # forkd refuses loudly (#180), never wrong bytes
        ForkdDaemon(other_store.snapshots_dir).spawn_memory("r", tmp_path / "strict")
    assert_forkd_sees_every_link(other_store.snapshots_dir, ["r"], tmp_path / "work", resize=True)


def with_snapshot_json(src, doc: dict):
    (src / "snapshot.json").write_text(
        json.dumps({"vmstate": "/elsewhere/vmstate", "memory": "/elsewhere/memory.bin", **doc}, indent=2)
    )
    return src


def fields(directory) -> dict:
    """snapshot.json without what every install derives (paths into the directory, the parent hash)."""
    doc = json.loads((directory / "snapshot.json").read_text())
    return {k: v for k, v in doc.items() if k not in ("vmstate", "memory", "parent_tag", "parent_content_hash")}


def test_every_snapshot_json_field_round_trips_push_pull_pack_unpack(
    store, other_store, inproc_hub, tmp_path, rootfs_dirs
):
    """volumes, rootfs (outside the directory: forkd's from-image cache; inside: the layer's own
    file, which no snapshot.json names) and unknown fields survive push → pull → pack → unpack, and forkd
    spawns every link."""
    image = rootfs_dirs / "python-3-12-slim.ext4"
    image.parent.mkdir(parents=True)
    image.write_bytes(os.urandom(8192))
    volume = {"host_path": "/var/lib/forkd/vol/pip.img", "guest_path": "/opt/cache", "read_only": True}
    base = with_snapshot_json(
        make_base_source(tmp_path / "src-base", seed=1),
        {"volumes": [volume], "rootfs": str(image), "x_future": {"n": 1}},
    )
    head = with_snapshot_json(
        make_zeroing_link(tmp_path / "src-head", base / "memory.bin", seed=2), {"volumes": [], "x_note": "head"}
    )
    (head / "rootfs.ext4").write_bytes(os.urandom(4096) + bytes(8192))
    store.import_snapshot(base, "base")
    store.import_snapshot(head, "head", parent="base")
    want = {
        "base": {"volumes": [volume], "rootfs": str(image), "x_future": {"n": 1}},
        "head": {"volumes": [], "x_note": "head"},  # its own rootfs.ext4 is not named (forkd's pack would send it)
    }
    assert {t: fields(store.path(t)) for t in want} == want
    assert_forkd_sees_every_link(store.snapshots_dir, ["base", "head"], tmp_path / "w0")  # as imported

    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(store, client, "head", Reference.parse("acme/f:v1"), public=True)
    pull(other_store, client, Reference.parse("acme/f:v1"), as_tag="head")
    assert [s.tag for s in other_store.chain("head")] == ["base", "head"]
    assert fields(other_store.path("base")) == want["base"]
    assert fields(other_store.path("head")) == want["head"]
    assert_forkd_sees_every_link(other_store.snapshots_dir, ["base", "head"], tmp_path / "w1")

    (tmp_path / "packs").mkdir()
    pack = other_store.pack("head", tmp_path / "packs" / "f.forkd-snapshot.tar.zst")
    with SnapshotStore(tmp_path / "third") as third:
        third.unpack(pack)
        assert fields(third.path("base")) == want["base"]
        placed = fields(third.path("head"))
        assert {k: v for k, v in placed.items() if k != "rootfs"} == {"volumes": [], "x_note": "head"}
        # the head's own rootfs came as forkd's sidecar, installed in an allowed place (never in the pack's dir)
        assert Path(placed["rootfs"]).read_bytes() == (head / "rootfs.ext4").read_bytes()
        assert Path(placed["rootfs"]).parent == third.root / "rootfs"
        assert_forkd_sees_every_link(third.snapshots_dir, ["base", "head"], tmp_path / "w2")

    # forkd's own pull against our registry.json: the hub's pack keeps the fields too
    with SnapshotStore(tmp_path / "fourth") as fourth:
        installed = pull_from_registry(
            fourth, "http://testserver.local/registry.json", "acme/f@v1", http=inproc_hub.http
        )
        assert [s.tag for s in installed][-1] == "f"
        base_tag = installed[0].tag
        assert fields(fourth.path(base_tag)) == want["base"]
        assert {k: v for k, v in fields(fourth.path("f")).items() if k != "rootfs"} == {"volumes": [], "x_note": "head"}
        assert_forkd_sees_every_link(fourth.snapshots_dir, [base_tag, "f"], tmp_path / "w3")
