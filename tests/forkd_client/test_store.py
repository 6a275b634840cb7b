from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkd_client import install as install_mod
from forkd_client import verified as verified_mod
from forkd_client.errors import (
    ChainBroken,
    DependentsExist,
    InvalidSnapshotDir,
    InvalidTag,
    ParentContentMismatch,
    SnapshotExists,
    SnapshotNotFound,
)
from forkd_client.store import SnapshotStore
from manifest.digest import digest_file

from .snapshots import MEM_SIZE, age, make_base_source, make_link_source, scribble, sha256_hex


def no_hashing(*args, **kwargs):
    raise AssertionError("a verified, unchanged file was hashed again")


def visible_state(store: SnapshotStore) -> tuple[list[str], list[str]]:
    staging = sorted(os.listdir(store.staging_root)) if store.staging_root.exists() else []
    return store.tags(), staging


# ---------------------------------------------------------------- import


def test_import_base_writes_forkd_compatible_dir(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src", rootfs=True)
    snap = store.import_snapshot(src, "py-base")
    d = store.snapshots_dir / "py-base"
    assert snap.dir == d and snap.is_base and snap.managed
    assert sorted(os.listdir(d)) == ["forkd-hub.json", "memory.bin", "rootfs.ext4", "snapshot.json", "vmstate"]
    for name in ("memory.bin", "vmstate", "rootfs.ext4"):
        assert (d / name).read_bytes() == (src / name).read_bytes()
    doc = json.loads((d / "snapshot.json").read_text())
    # the snapshot's own rootfs.ext4 is not named: forkd's pack would send that path to other hosts
    assert doc == {"vmstate": str(d / "vmstate"), "memory": str(d / "memory.bin"), "volumes": []}
    meta = json.loads((d / "forkd-hub.json").read_text())
    assert meta["schema_version"] == 1 and meta["tag"] == "py-base" and meta["parent_tag"] is None
    assert meta["chunk_size"] == 65536 and meta["created"].endswith("Z")
    mem = meta["files"]["memory.bin"]
    assert mem["size"] == MEM_SIZE and mem["sha256"] == "sha256:" + sha256_hex(src / "memory.bin")
    assert mem["digest"].startswith("blake3:")
    assert os.stat(d / "memory.bin").st_blocks * 512 < MEM_SIZE  # holes stayed holes
    assert snap.disk_size < snap.logical_size
    assert (src / "memory.bin").exists()  # cloned, not moved


def test_import_links_record_parent_content_hash(chain3: SnapshotStore) -> None:
    base, mid, head = (chain3.get(t) for t in ("base", "mid", "head"))
    assert mid.parent_tag == "base" and head.parent_tag == "mid"
    assert mid.parent_content_hash == sha256_hex(base.dir / "memory.bin")
    assert head.parent_content_hash == sha256_hex(mid.dir / "memory.bin")
    doc = json.loads((head.dir / "snapshot.json").read_text())
    assert doc["parent_tag"] == "mid" and doc["parent_content_hash"] == head.parent_content_hash
    assert "rootfs" not in doc  # no rootfs.ext4 in a link


def test_import_keeps_source_snapshot_json_fields_and_merges_compat(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    (src / "snapshot.json").write_text(
        json.dumps(
            {
                "vmstate": "/elsewhere/vmstate",
                "memory": "/elsewhere/memory.bin",
                "volumes": [{"host_path": "/data", "guest_path": "/mnt", "read_only": True}],
                "rootfs": "/var/cache/forkd/python-3-12-slim.ext4",
                "from_the_future": 7,
            }
        )
    )
    (src / "vmm.json").write_text(json.dumps({"compat": {"vmm": "qemu", "vcpus": 1}, "rootfs": None}))
    (src / "compat.json").write_text(json.dumps({"vcpus": 2, "arch": "x86_64"}))
    snap = store.import_snapshot(src, "t", compat={"accel": "tcg"}, annotations={"k": "v"})
    doc = json.loads((snap.dir / "snapshot.json").read_text())
    assert doc["volumes"][0]["host_path"] == "/data" and doc["from_the_future"] == 7
    assert doc["rootfs"] == "/var/cache/forkd/python-3-12-slim.ext4"  # shared image outside, as forkd has it
    assert doc["memory"] == str(snap.dir / "memory.bin")
    assert snap.compat == {"vmm": "qemu", "vcpus": 2, "arch": "x86_64", "accel": "tcg"}
    assert snap.annotations == {"k": "v"}


def test_import_refusals(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    with pytest.raises(InvalidTag):
        store.import_snapshot(src, "a.b")
    with pytest.raises(SnapshotNotFound, match="parent snapshot 'nope'"):
        store.import_snapshot(src, "t", parent="nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidSnapshotDir, match=r"memory.bin|vmstate"):
        store.import_snapshot(tmp_path / "empty", "t")
    with pytest.raises(InvalidSnapshotDir, match="not a directory"):
        store.import_snapshot(tmp_path / "missing", "t")
    (src / "compat.json").write_text("[1, 2]")
    with pytest.raises(InvalidSnapshotDir, match=r"compat.json"):
        store.import_snapshot(src, "t")
    assert visible_state(store) == ([], [])


def test_import_existing_tag_needs_force(store: SnapshotStore, tmp_path: Path) -> None:
    a = make_base_source(tmp_path / "a", seed=1)
    b = make_base_source(tmp_path / "b", seed=2)
    store.import_snapshot(a, "t")
    with pytest.raises(SnapshotExists, match="'t'"):
        store.import_snapshot(b, "t")
    store.import_snapshot(b, "t", force=True)
    assert (store.path("t") / "memory.bin").read_bytes() == (b / "memory.bin").read_bytes()
    assert visible_state(store) == (["t"], [])


def test_import_cannot_make_a_loop(chain3: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    with pytest.raises(InvalidTag, match="descends from"):
        chain3.import_snapshot(src, "base", parent="head", force=True)


def test_import_move(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    want = (src / "memory.bin").read_bytes()
    snap = store.import_snapshot(src, "t", move=True)
    assert not (src / "memory.bin").exists() and not (src / "vmstate").exists()
    assert (snap.dir / "memory.bin").read_bytes() == want


@pytest.mark.parametrize("move", [False, True])
def test_import_failure_leaves_nothing(store: SnapshotStore, tmp_path: Path, monkeypatch, move: bool) -> None:
    base_src = make_base_source(tmp_path / "base")
    store.import_snapshot(base_src, "base")
    src = make_link_source(tmp_path / "src", base_src / "memory.bin", seed=5)
    before = {p.name: p.read_bytes() for p in src.iterdir()}

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(install_mod, "write_hub_meta", fail)
    with pytest.raises(OSError, match="injected"):
        store.import_snapshot(src, "link", parent="base", move=move)
    assert visible_state(store) == (["base"], [])
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before  # moved files were put back


def test_failure_while_renaming_rolls_back(store: SnapshotStore, tmp_path: Path, monkeypatch) -> None:
    old = make_base_source(tmp_path / "old", seed=1)
    store.import_snapshot(old, "t")
    new = make_base_source(tmp_path / "new", seed=2)
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst) == store.path("t") and ".staging" in str(src) and "replaced" not in str(src):
            raise OSError(5, "I/O error (injected)")
        return real_rename(src, dst)

    monkeypatch.setattr(install_mod.os, "rename", rename)
    with pytest.raises(OSError, match="injected"):
        store.import_snapshot(new, "t", force=True)
    monkeypatch.setattr(install_mod.os, "rename", real_rename)
    assert (store.path("t") / "memory.bin").read_bytes() == (old / "memory.bin").read_bytes()
    assert visible_state(store) == (["t"], [])


# ---------------------------------------------------------------- reading


def test_list_get_dependents_descendants(chain3: SnapshotStore, tmp_path: Path) -> None:
    side = make_link_source(tmp_path / "side", chain3.path("base") / "memory.bin", seed=9)
    chain3.import_snapshot(side, "side", parent="base")
    assert [s.tag for s in chain3.list()] == ["base", "head", "mid", "side"]
    assert chain3.dependents("base") == ["mid", "side"]
    assert chain3.dependents("head") == []
    assert chain3.descendants("base") == ["mid", "side", "head"]
    assert [s.tag for s in chain3.chain("head")] == ["base", "mid", "head"]
    assert (chain3.depth("base"), chain3.depth("head")) == (1, 3)
    with pytest.raises(SnapshotNotFound):
        chain3.get("nope")
    with pytest.raises(InvalidTag):
        chain3.get("../etc")


def test_lost_parent_is_chain_broken(chain3: SnapshotStore) -> None:
    chain3.remove("base", force=True)
    with pytest.raises(ChainBroken) as info:
        chain3.chain("head")
    assert (info.value.link, info.value.missing) == ("mid", "base")
    assert "'mid' names parent 'base'" in str(info.value)
    with pytest.raises(ChainBroken):
        chain3.verify_chain("head")


def test_verify_chain_trusts_the_record(chain3: SnapshotStore, monkeypatch) -> None:
    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)
    assert [s.tag for s in chain3.verify_chain("head")] == ["base", "mid", "head"]


def test_changed_parent_is_parent_content_mismatch(chain3: SnapshotStore) -> None:
    expected = chain3.get("mid").parent_digest
    assert expected == chain3.get("base").files["memory.bin"].digest
    scribble(chain3.path("base") / "memory.bin")
    with pytest.raises(ParentContentMismatch) as info:
        chain3.verify_chain("head")
    err = info.value
    assert (err.child, err.parent, err.expected) == ("mid", "base", expected)
    assert err.actual == str(digest_file(chain3.path("base") / "memory.bin")["blake3"]) != expected
    assert "memory.bin blake3:" in str(err)


def test_wrong_parent_content_hash_is_caught_when_the_sha256_is_known(chain3: SnapshotStore) -> None:
    """A link whose blake3 parent_digest holds but whose forkd parent_content_hash is wrong:
    forkd would refuse it at spawn, so verify_chain does too (the parent's sha256 is recorded)."""
    doc_path = chain3.path("mid") / "snapshot.json"
    doc = json.loads(doc_path.read_text())
    doc["parent_content_hash"] = "0" * 64
    doc_path.write_text(json.dumps(doc, indent=2))
    for forkd_hashes in (False, True):
        with pytest.raises(ParentContentMismatch) as info:
            chain3.verify_chain("head", forkd_hashes=forkd_hashes)
        assert info.value.expected == "0" * 64
        assert info.value.actual == sha256_hex(chain3.path("base") / "memory.bin")


def test_snapshots_made_by_forkd_itself(store: SnapshotStore, tmp_path: Path) -> None:
    """No forkd-hub.json (forkd wrote it), or not even a snapshot.json (forkd's fallback)."""
    old = store.snapshots_dir / "old-style"
    make_base_source(old)  # vmstate + memory.bin only: a base
    age(old / "memory.bin")  # written long ago, so its first record is trusted at once (not "racy")
    link = store.snapshots_dir / "py-3.12"  # forkd's CLI allows dots
    make_link_source(link, old / "memory.bin", seed=4)
    (link / "snapshot.json").write_text(
        json.dumps(
            {
                "vmstate": str(link / "vmstate"),
                "memory": str(link / "memory.bin"),
                "volumes": [],
                "parent_tag": "old-style",
                "parent_content_hash": sha256_hex(old / "memory.bin"),
            },
            indent=2,
        )
    )
    (store.snapshots_dir / "not-a-snapshot").mkdir()
    (store.snapshots_dir / ".hidden").mkdir()
    assert store.tags() == ["old-style", "py-3.12"]
    snap = store.get("py-3.12")
    assert not snap.managed and snap.parent_tag == "old-style" and snap.files["memory.bin"].digest is None
    assert [s.tag for s in store.verify_chain("py-3.12")] == ["old-style", "py-3.12"]
    assert store.get("old-style").is_base
    # the record made by verify_chain now fills in the parent's sha256
    assert store.get("old-style").files["memory.bin"].sha256 == "sha256:" + sha256_hex(old / "memory.bin")
    assert store.remove("py-3.12") == ["py-3.12"]


# ---------------------------------------------------------------- tag, remove, compact


def test_tag_clones_files_and_parent(chain3: SnapshotStore, monkeypatch) -> None:
    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)  # digests carry over from mid
    copy = chain3.tag("mid", "mid-copy")
    mid = chain3.get("mid")
    assert (copy.parent_tag, copy.parent_content_hash) == ("base", mid.parent_content_hash)
    for name in ("memory.bin", "vmstate"):
        assert (copy.dir / name).read_bytes() == (mid.dir / name).read_bytes()
    assert copy.files == mid.files and copy.created == mid.created
    doc = json.loads((copy.dir / "snapshot.json").read_text())
    assert doc["memory"] == str(copy.dir / "memory.bin")
    assert chain3.dependents("base") == ["mid", "mid-copy"]
    with pytest.raises(SnapshotExists):
        chain3.tag("mid", "head")
    with pytest.raises(SnapshotNotFound):
        chain3.tag("nope", "x")


def test_remove_refuses_cascades_and_forces(chain3: SnapshotStore) -> None:
    with pytest.raises(DependentsExist) as info:
        chain3.remove("base")
    assert info.value.dependents == ["mid"] and "mid" in str(info.value)
    with pytest.raises(ValueError, match="cascade and force are mutually exclusive"):
        chain3.remove("base", cascade=True, force=True)
    assert chain3.remove("head") == ["head"]
    assert chain3.remove("base", force=True) == ["base"]
    assert chain3.tags() == ["mid"]
    with pytest.raises(SnapshotNotFound):
        chain3.remove("base")
    assert visible_state(chain3)[1] == []


def test_remove_cascade_goes_leaves_first(chain3: SnapshotStore, tmp_path: Path) -> None:
    side = make_link_source(tmp_path / "side", chain3.path("base") / "memory.bin", seed=9)
    chain3.import_snapshot(side, "side", parent="base")
    removed = chain3.remove("base", cascade=True)
    assert removed[-1] == "base" and set(removed) == {"base", "mid", "side", "head"}
    assert removed.index("head") < removed.index("mid")
    assert visible_state(chain3) == ([], [])


def test_compact_equals_the_head(chain3: SnapshotStore) -> None:
    flat = chain3.compact("head", "flat")
    head = chain3.get("head")
    assert flat.is_base and flat.parent_content_hash is None
    for name in ("memory.bin", "vmstate"):
        assert (flat.dir / name).read_bytes() == (head.dir / name).read_bytes()
    doc = json.loads((flat.dir / "snapshot.json").read_text())
    assert "parent_tag" not in doc and "parent_content_hash" not in doc
    assert flat.annotations["dev.forkd.compacted-from"] == "head"
    assert flat.files["memory.bin"].sha256 == head.files["memory.bin"].sha256
    with pytest.raises(SnapshotExists):
        chain3.compact("head", "flat")
    with pytest.raises(SnapshotExists):
        chain3.compact("head", "head")


def test_compact_refuses_a_bad_chain(chain3: SnapshotStore) -> None:
    scribble(chain3.path("mid") / "memory.bin")
    with pytest.raises(ParentContentMismatch):
        chain3.compact("head", "flat")
    assert "flat" not in chain3.tags() and visible_state(chain3)[1] == []


@pytest.mark.integration  # a process that ran and is gone (tests/tiers.py)
def test_staging_left_by_dead_process_is_swept(store: SnapshotStore, tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)
    store.staging_root.mkdir(parents=True)
    leftover = store.staging_root / f"{dead}-import-x-abcd"
    leftover.mkdir()
    (leftover / "memory.bin").write_bytes(b"half")
    store.import_snapshot(make_base_source(tmp_path / "src"), "t")
    assert not leftover.exists()
