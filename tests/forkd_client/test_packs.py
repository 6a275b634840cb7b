from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import zstandard

from forkd_client import verified as verified_mod
from forkd_client.errors import ChainBroken, InvalidTag, ParentContentMismatch, SnapshotExists
from forkd_client.store import SnapshotStore
from manifest.forkd_pack import PackLink, write_pack
from manifest.forkd_unpack import read_pack_manifest

from .snapshots import make_base_source, scribble, sha256_hex


@pytest.fixture
def other(tmp_path: Path):
    with SnapshotStore(tmp_path / "other-home") as s:
        yield s


def read_pack_snapshot_json(pack: Path, name: str = "snapshot.json") -> bytes:
    with (
        zstandard.ZstdDecompressor().stream_reader(open(pack, "rb")) as raw,
        tarfile.open(fileobj=raw, mode="r|") as tar,
    ):
        for member in tar:
            if member.name == name:
                return tar.extractfile(member).read()
    raise AssertionError(f"{name} not in {pack}")


def same_files(a: Path, b: Path, names=("memory.bin", "vmstate")) -> bool:
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def test_v1_round_trip_is_byte_identical(store: SnapshotStore, other: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src", rootfs=True)
    store.import_snapshot(src, "py-base")
    pack = store.pack("py-base", tmp_path / "py-base.forkd-snapshot.tar.zst", description="d", base_image="python:3.12")
    declared = read_pack_manifest(pack)
    assert declared.version == 1 and declared.tag == "py-base"
    # the rootfs travels as forkd's sidecar beside the pack, its target where forkd keeps images
    sha = sha256_hex(src / "rootfs.ext4")
    assert declared.rootfs == {
        "target_path": f"/var/cache/forkd/{sha[:16]}.ext4",
        "sha256": sha,
        "size": os.path.getsize(src / "rootfs.ext4"),
    }
    sidecar = (tmp_path / f"{sha[:16]}.rootfs.zst").read_bytes()  # plain zstd, as forkd reads it
    assert zstandard.ZstdDecompressor().decompressobj().decompress(sidecar) == (src / "rootfs.ext4").read_bytes()
    assert json.loads(read_pack_snapshot_json(pack))["rootfs"] == declared.rootfs["target_path"]
    [snap] = other.unpack(pack)
    assert snap.tag == "py-base" and snap.is_base
    assert same_files(snap.dir, store.path("py-base"), ("memory.bin", "vmstate"))
    doc = json.loads((snap.dir / "snapshot.json").read_text())
    assert doc["memory"] == str(snap.dir / "memory.bin")
    # /var/cache/forkd is not an allowed root here (FORKD_ROOTFS_DIRS): the store's own place
    assert doc["rootfs"] == str(other.root / "rootfs" / f"{sha[:16]}.ext4")
    assert Path(doc["rootfs"]).read_bytes() == (src / "rootfs.ext4").read_bytes()
    assert snap.annotations == {"org.opencontainers.image.description": "d", "dev.forkd.base-image": "python:3.12"}
    assert snap.files["memory.bin"].sha256 == "sha256:" + sha256_hex(src / "memory.bin")
    [renamed] = other.unpack(pack, tag="renamed")
    assert renamed.tag == "renamed" and same_files(renamed.dir, snap.dir)


def test_v2_round_trip_is_byte_identical(
    chain3: SnapshotStore, other: SnapshotStore, tmp_path: Path, monkeypatch
) -> None:
    pack = chain3.pack("head", tmp_path / "chain.tar.zst")
    declared = read_pack_manifest(pack)
    assert declared.version == 2 and [link.tag for link in declared.links] == ["base", "mid", "head"]
    installed = other.unpack(pack)
    assert [s.tag for s in installed] == ["base", "mid", "head"]
    for snap in installed:
        theirs = chain3.get(snap.tag)
        assert same_files(snap.dir, theirs.dir)
        assert (snap.parent_tag, snap.parent_content_hash) == (theirs.parent_tag, theirs.parent_content_hash)
    # sha256 digests verified while streaming were recorded: verifying hashes nothing
    monkeypatch.setattr(verified_mod, "digest_file", lambda *a, **k: pytest.fail("hashed again"))
    assert [s.tag for s in other.verify_chain("head")] == ["base", "mid", "head"]


def test_unpack_checks_destinations_before_extracting(
    chain3: SnapshotStore, other: SnapshotStore, tmp_path: Path
) -> None:
    pack = chain3.pack("head", tmp_path / "chain.tar.zst")
    other.import_snapshot(make_base_source(tmp_path / "mine", seed=42), "mid")
    with pytest.raises(SnapshotExists, match="'mid'"):
        other.unpack(pack)
    assert other.tags() == ["mid"] and os.listdir(other.staging_root) == []
    with pytest.raises(InvalidTag, match="chain"):
        other.unpack(pack, tag="x")
    installed = other.unpack(pack, force=True)
    assert [s.tag for s in installed] == ["base", "mid", "head"]
    assert same_files(other.path("mid"), chain3.path("mid"))


def test_partial_chain_needs_its_parent_installed_and_unchanged(
    chain3: SnapshotStore, other: SnapshotStore, tmp_path: Path
) -> None:
    mid = chain3.get("mid")
    pack = write_pack([PackLink("mid", mid.dir, "base", mid.parent_content_hash)], tmp_path / "mid.tar.zst")
    with pytest.raises(ChainBroken, match="'base'"):
        other.unpack(pack)
    base_src = make_base_source(tmp_path / "other-base", seed=77)  # a different "base"
    other.import_snapshot(base_src, "base")
    with pytest.raises(ParentContentMismatch) as info:
        other.unpack(pack)
    assert (info.value.child, info.value.parent) == ("mid", "base")
    assert other.tags() == ["base"]
    other.unpack(chain3.pack("base", tmp_path / "base.tar.zst"), force=True)
    [snap] = other.unpack(pack)
    assert snap.parent_tag == "base" and other.depth("mid") == 2


def test_pack_refuses_a_changed_parent(chain3: SnapshotStore, tmp_path: Path) -> None:
    scribble(chain3.path("base") / "memory.bin")
    with pytest.raises(ParentContentMismatch):
        chain3.pack("head", tmp_path / "chain.tar.zst")
    assert not (tmp_path / "chain.tar.zst").exists()


def forkd_v1_pack(path: Path, tag: str, src: Path) -> Path:
    """A v1 pack as forkd's CLI writes it, including tags (with dots) our writer refuses."""
    names = ["vmstate", "memory.bin"]
    manifest = f'forkd_pack_version = 1\ntag = "{tag}"\ncreated_at = "2026-06-14T10:00:00Z"\nforkd_version = "0.5.3"\n'
    for name in names:
        data = (src / name).read_bytes()
        manifest += f'\n[[files]]\npath = "{name}"\nsize = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in [("manifest.toml", manifest.encode()), *((n, (src / n).read_bytes()) for n in names)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    return path


def test_unpack_of_a_dotted_forkd_v1_tag_installs_it_as_forkd_does(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    pack = forkd_v1_pack(tmp_path / "p.tar.zst", "py-3.12", src)
    [dotted] = store.unpack(pack)  # forkd's unpack validates with its CLI rule: dots allowed
    assert dotted.tag == "py-3.12" and store.tags() == ["py-3.12"] and same_files(dotted.dir, src)
    assert json.loads((dotted.dir / "snapshot.json").read_text())["memory"] == str(dotted.dir / "memory.bin")
    assert store.unpack(pack, tag="py-3.13")[0].tag == "py-3.13"
    with pytest.raises(InvalidTag, match="not a valid tag"):
        store.unpack(pack, tag=".hidden")
    [snap] = store.unpack(pack, tag="py-3-12")
    assert snap.tag == "py-3-12" and same_files(snap.dir, src)
    assert snap.created == "2026-06-14T10:00:00Z"
    doc = json.loads((snap.dir / "snapshot.json").read_text())  # synthesised: the pack had none
    assert doc == {"vmstate": str(snap.dir / "vmstate"), "memory": str(snap.dir / "memory.bin"), "volumes": []}
