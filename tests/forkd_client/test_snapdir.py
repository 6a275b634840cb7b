from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkd_client.errors import InvalidSnapshotDir, InvalidTag
from forkd_client.snapdir import (
    HubMeta,
    dump_snapshot_json,
    read_hub_meta,
    read_parent,
    snapshot_json_for,
    validate_existing_tag,
    validate_tag,
)


@pytest.mark.parametrize("tag", ["py-base", "a", "_x", "A_1-b", "9" * 64])
def test_valid_tags(tag: str) -> None:
    assert validate_tag(tag) == tag
    assert validate_existing_tag(tag) == tag


@pytest.mark.parametrize("tag", ["", "-x", "a.b", "a/b", "..", "a+b", "ns/repo", "x" * 65, "a b", "é"])
def test_invalid_new_tags(tag: str) -> None:
    with pytest.raises(InvalidTag):
        validate_tag(tag)


def test_existing_tags_follow_forkd_cli_rule() -> None:
    assert validate_existing_tag("py-3.12") == "py-3.12"  # forkd's CLI allows dots
    for bad in ("..", ".hidden", "a/b", ""):
        with pytest.raises(InvalidTag):
            validate_existing_tag(bad)


def test_snapshot_json_keeps_unknown_fields_and_sets_paths(tmp_path: Path) -> None:
    base = {
        "vmstate": "/old/vmstate",
        "memory": "/old/memory.bin",
        "volumes": [{"host_path": "/v"}],
        "future_field": {"x": 1},
        "parent_tag": "stale",
        "parent_content_hash": "00",
    }
    final = tmp_path / "snapshots" / "t"
    doc = snapshot_json_for(final, base, parent_tag=None, parent_content_hash=None, has_rootfs=False)
    assert doc == {
        "vmstate": str(final / "vmstate"),
        "memory": str(final / "memory.bin"),
        "volumes": [{"host_path": "/v"}],
        "future_field": {"x": 1},
    }
    link = snapshot_json_for(final, None, parent_tag="p", parent_content_hash="ab" * 32, has_rootfs=True)
    assert list(link) == ["vmstate", "memory", "volumes", "parent_tag", "parent_content_hash"]


def test_a_snapshots_own_rootfs_is_never_named(tmp_path: Path) -> None:
    """forkd's own pack would make a named rootfs the sidecar's target_path, a path into this store that forkd's
    unpack recreates on other hosts: the disk in the directory is found without it (and packed inside the pack)."""
    final = tmp_path / "snapshots" / "t"
    for recorded in (None, str(final / "rootfs.ext4"), "/home/else/.local/share/forkd/snapshots/t/rootfs.ext4"):
        base = {"vmstate": "/v", "memory": "/m"} | ({"rootfs": recorded} if recorded else {})
        doc = snapshot_json_for(final, base, parent_tag=None, parent_content_hash=None, has_rootfs=True)
        assert "rootfs" not in doc, recorded


def test_rootfs_outside_is_kept_inside_is_dropped(tmp_path: Path) -> None:
    final, src = tmp_path / "final", tmp_path / "src"
    shared = {"rootfs": "/var/cache/forkd/python-3-12-slim.ext4"}
    kept = snapshot_json_for(
        final, shared, parent_tag=None, parent_content_hash=None, has_rootfs=False, local_dirs=(src,)
    )
    assert kept["rootfs"] == shared["rootfs"]
    dangling = {"rootfs": str(src / "rootfs.ext4")}
    dropped = snapshot_json_for(
        final, dangling, parent_tag=None, parent_content_hash=None, has_rootfs=False, local_dirs=(src,)
    )
    assert "rootfs" not in dropped


def test_dump_matches_serde_pretty() -> None:
    doc = {"vmstate": "/a/vmstate", "memory": "/a/memory.bin", "volumes": []}
    assert dump_snapshot_json(doc) == (
        b'{\n  "vmstate": "/a/vmstate",\n  "memory": "/a/memory.bin",\n  "volumes": []\n}'
    )


def test_read_parent(tmp_path: Path) -> None:
    assert read_parent(tmp_path) == (None, None)  # forkd's fallback: no snapshot.json is a base
    (tmp_path / "snapshot.json").write_text(json.dumps({"parent_tag": "p", "parent_content_hash": "ab"}))
    assert read_parent(tmp_path) == ("p", "ab")
    (tmp_path / "snapshot.json").write_text(json.dumps({"parent_tag": "../../etc"}))
    with pytest.raises(InvalidSnapshotDir, match="not a valid tag"):
        read_parent(tmp_path)
    (tmp_path / "snapshot.json").write_text("{not json")
    with pytest.raises(InvalidSnapshotDir, match="not valid JSON"):
        read_parent(tmp_path)


def test_hub_meta_round_trip_and_validation(tmp_path: Path) -> None:
    meta = HubMeta("t", "p", "2026-06-14T10:00:00Z", 65536, {"vmm": "qemu"}, {"k": "v"})
    (tmp_path / "forkd-hub.json").write_text(json.dumps(meta.to_obj()))
    assert read_hub_meta(tmp_path) == meta
    (tmp_path / "forkd-hub.json").write_text(json.dumps({"tag": 3}))
    with pytest.raises(InvalidSnapshotDir, match=r"forkd-hub.json"):
        read_hub_meta(tmp_path)


def test_hub_meta_chunk_trees_round_trip_and_are_checked(tmp_path: Path) -> None:
    """What a format v2 pull records: each file's chunk tree and the parent's, read back as written."""
    from forkd_client.snapdir import FileRecord

    tree = (65536, "blake3:" + "ab" * 32)
    meta = HubMeta(
        "t",
        "p",
        "2026-06-14T10:00:00Z",
        65536,
        files={"memory.bin": FileRecord(4096, None, None, tree)},
        parent_tree=(65536, "blake3:" + "cd" * 32),
    )
    obj = meta.to_obj()
    assert obj["files"]["memory.bin"]["chunk_tree"] == {"chunk_size": 65536, "digest": tree[1]}
    (tmp_path / "forkd-hub.json").write_text(json.dumps(obj))
    assert read_hub_meta(tmp_path) == meta
    for bad in ({"chunk_size": 0, "digest": tree[1]}, {"chunk_size": 65536, "digest": "sha256:00"}, "x"):
        (tmp_path / "forkd-hub.json").write_text(json.dumps({**obj, "parent_chunk_tree": bad}))
        with pytest.raises(InvalidSnapshotDir, match=r"parent_chunk_tree"):
            read_hub_meta(tmp_path)
