"""What we install works in forkd's own daemon, byte for byte (issue 11).

``tests/forkd_daemon.py`` re-implements forkd's chain semantics (resolve by ``parent_tag``,
sha256 check of each parent's memory, assembly = copy the base, then apply each link's
SEEK_DATA ranges). For chains made by import and unpack (of our packs and of packs laid out
exactly as forkd writes them), forkd's image for every link must equal that link's own
memory.bin, including links that zero memory which held data in the parent.
Pull and snapshot-diff have the same check in tests/forkd_client/hub/test_pull_fidelity.py
and tests/forkd_client/test_cli_vm.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import zstandard

from forkd_client.errors import UnsafeLinkHoles
from forkd_client.store import SnapshotStore
from manifest.fileops import clone_file
from manifest.holes import unsafe_holes

from ..forkd_daemon import ForkdDaemon, ForkdError, assert_forkd_sees_every_link
from ..manifest import hostile_packs as hp
from .snapshots import PAGE, make_base_source, make_zeroing_link


@pytest.fixture
def zeroing_chain(store: SnapshotStore, tmp_path: Path) -> SnapshotStore:
    """base <- zero1 <- zero2 by import; each link zeroes pages its parent held."""
    base = make_base_source(tmp_path / "src-base", seed=1)
    one = make_zeroing_link(tmp_path / "src-1", base / "memory.bin", seed=2)
    two = make_zeroing_link(tmp_path / "src-2", one / "memory.bin", seed=3)
    assert unsafe_holes(one / "memory.bin", base / "memory.bin"), "the source link must have unsafe holes"
    store.import_snapshot(base, "base")
    store.import_snapshot(one, "zero1", parent="base")
    store.import_snapshot(two, "zero2", parent="zero1")
    return store


def test_imported_links_that_zero_parent_memory_assemble_right_in_forkd(zeroing_chain, tmp_path):
    root = zeroing_chain.snapshots_dir
    assert_forkd_sees_every_link(root, ["base", "zero1", "zero2"], tmp_path / "work")
    assert not unsafe_holes(root / "zero1" / "memory.bin", root / "base" / "memory.bin")
    # holes stay where the parent is zero too: links stay sparse
    assert os.stat(root / "zero1" / "memory.bin").st_blocks * 512 < os.path.getsize(root / "zero1" / "memory.bin")


def test_unpacked_links_of_our_pack_assemble_right_in_forkd(zeroing_chain, tmp_path):
    pack = zeroing_chain.pack("zero2", tmp_path / "z.forkd-snapshot.tar.zst")
    with SnapshotStore(tmp_path / "other") as other:
        other.unpack(pack)
        assert_forkd_sees_every_link(other.snapshots_dir, ["base", "zero1", "zero2"], tmp_path / "work")


def test_unpacked_forkd_layout_pack_with_dense_zeroed_pages_assembles_right(store, tmp_path):
    """A v2 pack exactly as forkd writes it: dense full images, the child zeroing parent pages."""
    base_mem = b"\x11" * (4 * PAGE) + bytes(8 * PAGE) + b"\x22" * (4 * PAGE)
    child_mem = b"\x11" * PAGE + bytes(11 * PAGE) + b"\x22" * (3 * PAGE) + b"\x33" * PAGE
    grand_mem = bytes(16 * PAGE)  # everything zeroed

    def files(tag: str, mem: bytes, parent: str | None) -> dict[str, bytes]:
        doc = {
            "vmstate": f"/root/.local/share/forkd/snapshots/{tag}/vmstate",
            "memory": f"/root/.local/share/forkd/snapshots/{tag}/memory.bin",
            "volumes": [],
        }
        return {"snapshot.json": json.dumps(doc, indent=2).encode(), "vmstate": f"vm-{tag}".encode(), "memory.bin": mem}

    chain = [
        ("py-base", None, files("py-base", base_mem, None)),
        ("py-child", "py-base", files("py-child", child_mem, "py-base")),
        ("py-grand", "py-child", files("py-grand", grand_mem, "py-child")),
    ]
    pack = tmp_path / "forkd.forkd-snapshot.tar.zst"
    pack.write_bytes(hp.pack(hp.member("manifest.toml", hp.manifest_v2(chain)), *hp.v2_members(chain)))
    store.unpack(pack)
    assert_forkd_sees_every_link(store.snapshots_dir, ["py-base", "py-child", "py-grand"], tmp_path / "work")
    assert (store.path("py-grand") / "memory.bin").read_bytes() == grand_mem


@pytest.mark.parametrize("factor", [2, 0.5], ids=["grow", "shrink"])
def test_links_that_resize_memory_are_refused_loudly_by_forkd_and_right_when_resized(store, tmp_path, factor):
    """forkd's apply_diff refuses a link of another size (#180): never silently wrong memory.
    Assembled by a daemon that resizes first, the image is the link's own, byte for byte."""
    base = make_base_source(tmp_path / "src-base", seed=1)
    size = int(os.path.getsize(base / "memory.bin") * factor)
    link = make_zeroing_link(tmp_path / "src-link", base / "memory.bin", seed=5, size=size)
    store.import_snapshot(base, "base")
    store.import_snapshot(link, "resized", parent="base")
    with pytest.raises(ForkdError, match="size mismatch"):
        ForkdDaemon(store.snapshots_dir).spawn_memory("resized", tmp_path / "strict")
    assert_forkd_sees_every_link(store.snapshots_dir, ["resized"], tmp_path / "work", resize=True)
    pack = store.pack("resized", tmp_path / "r.forkd-snapshot.tar.zst")
    with SnapshotStore(tmp_path / "other") as other:
        other.unpack(pack)
        assert_forkd_sees_every_link(other.snapshots_dir, ["base", "resized"], tmp_path / "work2", resize=True)


def test_relative_forkd_home_still_writes_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKD_HOME", "relhome")
    src = make_base_source(tmp_path / "src", seed=1)
    with SnapshotStore() as store:
        store.import_snapshot(src, "base")
    doc = json.loads((tmp_path / "relhome" / "snapshots" / "base" / "snapshot.json").read_text())
    assert doc["vmstate"] == str(tmp_path / "relhome" / "snapshots" / "base" / "vmstate")
    assert doc["memory"] == str(tmp_path / "relhome" / "snapshots" / "base" / "memory.bin")
    monkeypatch.chdir("/")  # forkd's daemon runs with cwd /
    assert ForkdDaemon(tmp_path / "relhome" / "snapshots").spawn_memory("base", tmp_path / "w").is_file()


def test_forkd_layout_pack_with_a_rootfs_sidecar_installs_at_forkds_target(store, tmp_path, rootfs_dirs):
    """A v1 pack and sidecar exactly as forkd writes them (#242): the image lands at target_path
    (inside an allowed root), snapshot.json names it, and forkd's daemon finds it."""
    image = os.urandom(3000) + bytes(9000)
    sha = hashlib.sha256(image).hexdigest()
    target = rootfs_dirs / "python-3-12-slim.ext4"
    doc = {
        "vmstate": "/root/.local/share/forkd/snapshots/py/vmstate",
        "memory": "/root/.local/share/forkd/snapshots/py/memory.bin",
        "volumes": [{"host_path": "/v.img", "guest_path": "/opt/v", "read_only": False}],
        "rootfs": str(target),
    }
    files = {"snapshot.json": json.dumps(doc, indent=2).encode(), "vmstate": b"vm", "memory.bin": b"\x01" * PAGE}
    extra = f'\n[rootfs]\ntarget_path = "{target}"\nsha256 = "{sha}"\nsize = {len(image)}\n'
    (tmp_path / "dl").mkdir()
    pack = tmp_path / "dl" / "py.forkd-snapshot.tar.zst"
    pack.write_bytes(
        hp.pack(
            hp.member("manifest.toml", hp.manifest_v1(files, tag="py", extra=extra)),
            *(hp.member(p, d) for p, d in files.items()),
        )
    )
    (tmp_path / "dl" / f"{sha[:16]}.rootfs.zst").write_bytes(zstandard.ZstdCompressor(level=19).compress(image))
    [snap] = store.unpack(pack)
    installed = json.loads((snap.dir / "snapshot.json").read_text())
    assert installed["rootfs"] == str(target) and target.read_bytes() == image
    assert installed["volumes"] == doc["volumes"]
    assert ForkdDaemon(store.snapshots_dir).spawn_memory("py", tmp_path / "w").read_bytes() == b"\x01" * PAGE


def test_inspect_verify_names_links_forkd_would_assemble_wrong(store, tmp_path):
    """A link installed with holes over its parent's data (before the hole rule) is reported."""
    base = make_base_source(tmp_path / "src-base", seed=1)
    link = make_zeroing_link(tmp_path / "src-link", base / "memory.bin", seed=2)
    store.import_snapshot(base, "base")
    store.import_snapshot(link, "link", parent="base")
    store.verify_chain("link", forkd_hashes=True)  # installed now: nothing to report
    stale = store.path("link") / "memory.bin"  # what an older install left: the source's holes, same bytes
    stale.unlink()
    clone_file(link / "memory.bin", stale)
    with pytest.raises(AssertionError, match="forkd would map different memory for 'link'"):
        assert_forkd_sees_every_link(store.snapshots_dir, ["link"], tmp_path / "work")
    with pytest.raises(UnsafeLinkHoles, match=r"'link' has holes in memory.bin where its parent 'base' holds data"):
        store.verify_chain("link", forkd_hashes=True)
    store.tag("link", "link2")  # every writer of a link applies the rule: a clone is a repair
    store.verify_chain("link2", forkd_hashes=True)
    assert_forkd_sees_every_link(store.snapshots_dir, ["link2"], tmp_path / "work2")


def test_the_forkd_daemon_model_behaves_as_forkd_documents(tmp_path):
    """The model itself: holes keep the parent's bytes, hashes are checked, cycles and unsafe tags refused."""
    root = tmp_path / "snapshots"

    def snap(tag: str, memory: bytes, parent: str | None = None, hole_pages: tuple[int, ...] = (), **extra) -> Path:
        d = root / tag
        d.mkdir(parents=True)
        (d / "vmstate").write_bytes(b"vm")
        with open(d / "memory.bin", "wb") as f:
            f.truncate(len(memory))
            for off in range(0, len(memory), PAGE):
                if off // PAGE not in hole_pages:
                    f.seek(off)
                    f.write(memory[off : off + PAGE])
        doc = {"vmstate": str(d / "vmstate"), "memory": str(d / "memory.bin"), **extra}
        if parent:
            doc["parent_tag"] = parent
            doc.setdefault(
                "parent_content_hash", hashlib.sha256((root / parent / "memory.bin").read_bytes()).hexdigest()
            )
        (d / "snapshot.json").write_text(json.dumps(doc))
        return d

    daemon = ForkdDaemon(root)
    snap("b", b"\x01" * 2 * PAGE)
    snap("c", b"\x02" * PAGE + bytes(PAGE), parent="b", hole_pages=(1,))  # page 1 zero as a hole
    assert daemon.spawn_memory("c", tmp_path / "w").read_bytes() == b"\x02" * PAGE + b"\x01" * PAGE  # parent's bytes
    snap("d", b"\x03" * 2 * PAGE, parent="b", parent_content_hash="0" * 64)
    with pytest.raises(ForkdError, match="expects parent 'b'"):
        daemon.spawn_memory("d", tmp_path / "w")
    snap("e", b"\x03" * 2 * PAGE, parent="b", parent_content_hash=None)
    with pytest.raises(ForkdError, match="no parent_content_hash"):
        daemon.spawn_memory("e", tmp_path / "w")
    snap("x", b"\x04" * PAGE, parent="b")
    (root / "x" / "snapshot.json").write_text(
        json.dumps({**json.loads((root / "x" / "snapshot.json").read_text()), "parent_tag": "x"})
    )
    with pytest.raises(ForkdError, match="cycle"):
        daemon.spawn_memory("x", tmp_path / "w")
    with pytest.raises(ForkdError, match="unsafe tag"):
        daemon.spawn_memory("py-3.12", tmp_path / "w")
    snap("r", b"\x05" * PAGE, rootfs=str(tmp_path / "missing.ext4"))
    with pytest.raises(ForkdError, match="missing its rootfs"):
        daemon.spawn_memory("r", tmp_path / "w")
