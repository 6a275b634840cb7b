"""write_pack produces forkd v1/v2 packs that round-trip byte for byte and match forkd's layout."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import tomllib
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from manifest import forkd_pack
from manifest.forkd_pack import (
    PackError,
    PackHashMismatch,
    PackLink,
    PackManifestInvalid,
    PackTooLarge,
    write_pack,
)
from manifest.forkd_unpack import read_pack

CREATED = "2026-06-14T10:00:00Z"
MiB = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_snapshot(
    directory: Path,
    *,
    memory: bytes | None = None,
    sparse_mib: int = 0,
    rootfs: bytes | None = None,
    snapshot_json: bool = True,
    extra_json: dict | None = None,
) -> Path:
    """A forkd-shaped snapshot dir; ``sparse_mib`` makes memory.bin a holey file of that size."""
    directory.mkdir(parents=True)
    (directory / "vmstate").write_bytes(b"vmstate:" + directory.name.encode() * 100)
    mem = directory / "memory.bin"
    if sparse_mib:
        with open(mem, "wb") as f:
            f.truncate(sparse_mib * MiB)
            for offset in (0, MiB + 123, sparse_mib * MiB - 4096):
                f.seek(offset)
                f.write(os.urandom(4096))
    else:
        mem.write_bytes(memory if memory is not None else os.urandom(5000) + bytes(70000))
    if rootfs is not None:
        (directory / "rootfs.ext4").write_bytes(rootfs)
    if snapshot_json:
        doc = {
            "vmstate": f"/packer/{directory.name}/vmstate",
            "memory": f"/packer/{directory.name}/memory.bin",
            "volumes": [],
        }
        doc.update(extra_json or {})
        (directory / "snapshot.json").write_text(json.dumps(doc, indent=2))
    return directory


def pack_members(pack: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Read a pack with the stdlib's tarfile, independently of our reader."""
    with (
        open(pack, "rb") as f,
        zstandard.ZstdDecompressor().stream_reader(f) as z,
        tarfile.open(fileobj=z, mode="r|") as tar,
    ):
        return [(m, tar.extractfile(m).read()) for m in tar]


def same_file(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


def test_v1_round_trip_is_byte_identical_with_sparse_memory_and_rootfs(tmp_path: Path) -> None:
    src = make_snapshot(tmp_path / "src" / "py-base", sparse_mib=4, rootfs=os.urandom(3000) + bytes(9000),
                        extra_json={"rootfs": "/var/cache/forkd/python.ext4", "custom": {"kept": True}})  # fmt: skip
    out = write_pack([PackLink("py-base", src)], tmp_path / "py-base.forkd-snapshot.tar.zst", created_at=CREATED)
    staging = tmp_path / "staging"
    staging.mkdir()

    unpacked = read_pack(out, staging)

    assert unpacked.version == 1 and unpacked.tag == "py-base"
    (link,) = unpacked.links
    assert link.directory == staging / "py-base"
    for name in ("vmstate", "memory.bin", "rootfs.ext4"):
        assert same_file(src / name, link.directory / name), name
    assert {f.path: f.sha256 for f in link.files} == {
        name: sha((src / name).read_bytes()) for name in ("snapshot.json", "vmstate", "rootfs.ext4", "memory.bin")
    }
    original = json.loads((src / "snapshot.json").read_text())
    rewritten = json.loads((link.directory / "snapshot.json").read_text())
    assert rewritten == {**original, "vmstate": str(link.directory.absolute() / "vmstate"),
                         "memory": str(link.directory.absolute() / "memory.bin")}  # fmt: skip
    source_blocks = os.stat(src / "memory.bin").st_blocks * 512
    if source_blocks < 4 * MiB:  # the filesystem keeps holes: extraction must keep them too
        assert os.stat(link.directory / "memory.bin").st_blocks * 512 < 4 * MiB


def test_v2_round_trip_is_byte_identical_and_fills_parent_hashes(tmp_path: Path) -> None:
    base = make_snapshot(tmp_path / "src" / "base", sparse_mib=3, rootfs=b"ext4" * 500)
    numpy = make_snapshot(tmp_path / "src" / "numpy", snapshot_json=False)
    pandas = make_snapshot(tmp_path / "src" / "pandas", extra_json={"parent_tag": "numpy"})
    links = [PackLink("base", base), PackLink("numpy", numpy, "base"), PackLink("pandas", pandas, "numpy")]
    out = write_pack(links, tmp_path / "chain.tar.zst", description="pandas on numpy", created_at=CREATED)
    staging = tmp_path / "staging"
    staging.mkdir()

    unpacked = read_pack(out, staging)

    assert unpacked.version == 2 and unpacked.tag == "pandas" and unpacked.description == "pandas on numpy"
    assert [link.tag for link in unpacked.links] == ["base", "numpy", "pandas"]
    assert [link.parent_tag for link in unpacked.links] == [None, "base", "numpy"]
    assert [link.parent_content_hash for link in unpacked.links] == [
        None, sha((base / "memory.bin").read_bytes()), sha((numpy / "memory.bin").read_bytes())]  # fmt: skip
    for link, src in zip(unpacked.links, (base, numpy, pandas), strict=True):
        assert link.directory == staging / link.tag
        for name in ("vmstate", "memory.bin", "rootfs.ext4"):
            if (src / name).exists():
                assert same_file(src / name, link.directory / name), (link.tag, name)
    # numpy had no snapshot.json: the reader synthesises forkd's minimal one from the chain meta
    synthesized = json.loads((staging / "numpy" / "snapshot.json").read_text())
    assert synthesized == {
        "vmstate": str((staging / "numpy").absolute() / "vmstate"),
        "memory": str((staging / "numpy").absolute() / "memory.bin"),
        "volumes": [],
        "parent_tag": "base",
        "parent_content_hash": sha((base / "memory.bin").read_bytes()),
    }


def test_manifest_is_first_and_has_exactly_forkds_keys(tmp_path: Path) -> None:
    a = make_snapshot(tmp_path / "a", rootfs=b"r")
    b = make_snapshot(tmp_path / "b")
    v1 = write_pack([PackLink("a", a)], tmp_path / "v1.tar.zst", description="d", base_image="python:3.12-slim")
    v2 = write_pack([PackLink("a", a), PackLink("b", b, "a")], tmp_path / "v2.tar.zst")

    members = pack_members(v1)
    assert [m.name for m, _ in members] == ["manifest.toml", "snapshot.json", "vmstate", "rootfs.ext4", "memory.bin"]
    assert all(m.isreg() and m.mode == 0o644 for m, _ in members)
    manifest = tomllib.loads(members[0][1].decode())
    assert list(manifest) == [
        "forkd_pack_version",
        "tag",
        "description",
        "base_image",
        "created_at",
        "forkd_version",
        "files",
    ]
    assert manifest["forkd_pack_version"] == 1 and manifest["tag"] == "a"
    assert [set(f) for f in manifest["files"]] == [{"path", "size", "sha256"}] * 4
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {m.name: sha(data) for m, data in members[1:]}

    members = pack_members(v2)
    assert [m.name for m, _ in members] == [
        "manifest.toml", "a/snapshot.json", "a/vmstate", "a/rootfs.ext4", "a/memory.bin",
        "b/snapshot.json", "b/vmstate", "b/memory.bin"]  # fmt: skip
    manifest = tomllib.loads(members[0][1].decode())
    assert list(manifest) == [
        "forkd_pack_version",
        "tag",
        "created_at",
        "forkd_version",
        "parent_tag",
        "files",
        "chain",
    ]
    assert manifest["forkd_pack_version"] == 2 and manifest["tag"] == "b" and manifest["parent_tag"] == "a"
    assert manifest["files"] == []
    assert [list(link) for link in manifest["chain"]] == [
        ["tag", "files"],
        ["tag", "parent_tag", "parent_content_hash", "files"],
    ]
    assert manifest["chain"][1]["parent_content_hash"] == sha((a / "memory.bin").read_bytes())


def test_container_is_one_zstd_frame_holding_a_gnu_tar_in_toml_08_layout(tmp_path: Path) -> None:
    a, b = make_snapshot(tmp_path / "a"), make_snapshot(tmp_path / "b")
    out = write_pack([PackLink("a", a), PackLink("b", b, "a")], tmp_path / "p.tar.zst")
    compressed = out.read_bytes()
    decoder = zstandard.ZstdDecompressor().decompressobj()
    tar = decoder.decompress(compressed)
    assert decoder.eof and decoder.unused_data == b""  # exactly one complete frame
    assert tar[257:265] == b"ustar  \0"  # GNU magic, as tar-rs Header::new_gnu
    assert tar.endswith(b"\0" * 1024) and len(tar) % 512 == 0
    text = tar[512 : 512 + int(tar[124:135], 8)].decode()
    assert "\nfiles = []\n" in text and "\n[[chain]]\n" in text and "\n[[chain.files]]\n" in text
    assert not (tmp_path / "p.tar.zst.partial").exists()


def test_pack_bytes_depend_only_on_inputs(tmp_path: Path) -> None:
    src = make_snapshot(tmp_path / "s")
    first = write_pack([PackLink("s", src)], tmp_path / "1.tar.zst", created_at=CREATED).read_bytes()
    second = write_pack([PackLink("s", src)], tmp_path / "2.tar.zst", created_at=CREATED).read_bytes()
    assert first == second


def test_a_lone_link_with_a_parent_is_written_as_v2(tmp_path: Path) -> None:
    src = make_snapshot(tmp_path / "child")
    out = write_pack([PackLink("child", src, "base", "ab" * 32)], tmp_path / "p.tar.zst")
    staging = tmp_path / "staging"
    staging.mkdir()
    unpacked = read_pack(out, staging)
    assert unpacked.version == 2
    assert (unpacked.links[0].parent_tag, unpacked.links[0].parent_content_hash) == ("base", "ab" * 32)


@pytest.mark.parametrize(
    ("links", "error", "says"),
    [
        (lambda d: [], PackManifestInvalid, "at least one link"),
        (lambda d: [PackLink("../evil", d)], PackManifestInvalid, "'../evil'"),
        (lambda d: [PackLink("a.b", d)], PackManifestInvalid, "'a.b'"),
        (lambda d: [PackLink("a", d), PackLink("a", d, "a")], PackManifestInvalid, "twice"),
        (lambda d: [PackLink("a", d), PackLink("b", d, "x")], PackManifestInvalid, "broken chain"),
        (lambda d: [PackLink("a", d), PackLink("b", d, "a", "AB" * 32)], PackManifestInvalid, "lowercase"),
        (lambda d: [PackLink("a", d), PackLink("b", d, "a", "ab" * 32)], PackHashMismatch, "a/memory.bin"),
        (lambda d: [PackLink(f"l{i}", d, f"l{i - 1}" if i else None) for i in range(33)], PackTooLarge, "33 links"),
    ],
)
def test_write_pack_rejects_bad_links_and_leaves_nothing(tmp_path: Path, links, error, says) -> None:
    src = make_snapshot(tmp_path / "src")
    out = tmp_path / "p.tar.zst"
    with pytest.raises(error) as info:
        write_pack(links(src), out)
    assert says in str(info.value)
    assert not out.exists() and not (tmp_path / "p.tar.zst.partial").exists()


def test_write_pack_requires_vmstate_and_memory(tmp_path: Path) -> None:
    src = make_snapshot(tmp_path / "src")
    (src / "memory.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"memory.bin"):
        write_pack([PackLink("src", src)], tmp_path / "p.tar.zst")
    assert list(tmp_path.iterdir()) == [src]  # no pack, no .partial


def test_write_pack_refuses_a_source_that_is_not_a_regular_file(tmp_path: Path) -> None:
    src = make_snapshot(tmp_path / "src")
    (src / "rootfs.ext4").mkdir()
    with pytest.raises(PackError, match=r"rootfs.ext4 is not a regular file"):
        write_pack([PackLink("src", src)], tmp_path / "p.tar.zst")
    assert not (tmp_path / "p.tar.zst.partial").exists()


def test_a_source_changing_between_hash_and_tar_passes_fails_and_leaves_no_partial(tmp_path: Path, monkeypatch) -> None:
    src = make_snapshot(tmp_path / "src")
    hash_link = forkd_pack._hash_link

    def hash_then_shrink(link: PackLink):
        files = hash_link(link)
        os.truncate(link.directory / "memory.bin", 100)  # someone rewrites the snapshot mid-pack
        return files

    monkeypatch.setattr(forkd_pack, "_hash_link", hash_then_shrink)
    with pytest.raises(PackError, match=r"memory.bin is shorter than its recorded size"):
        write_pack([PackLink("src", src)], tmp_path / "p.tar.zst")
    assert list(tmp_path.iterdir()) == [src]


@settings(max_examples=25, deadline=None)
@given(
    chain=st.lists(
        st.tuples(
            st.binary(max_size=3000),  # vmstate
            st.binary(max_size=70000) | st.integers(0, 300_000).map(bytes),  # memory.bin: random or zeros
            st.none() | st.binary(max_size=5000),  # rootfs.ext4
            st.booleans(),  # has snapshot.json
        ),
        min_size=1,
        max_size=3,
    )
)
def test_random_contents_round_trip(chain) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        links = []
        for i, (vmstate, memory, rootfs, has_json) in enumerate(chain):
            d = root / "src" / f"l{i}"
            d.mkdir(parents=True)
            (d / "vmstate").write_bytes(vmstate)
            (d / "memory.bin").write_bytes(memory)
            if rootfs is not None:
                (d / "rootfs.ext4").write_bytes(rootfs)
            if has_json:
                (d / "snapshot.json").write_text('{"vmstate": "/x", "memory": "/y", "volumes": [], "z": 1}')
            links.append(PackLink(f"l{i}", d, f"l{i - 1}" if i else None))
        out = write_pack(links, root / "p.tar.zst")
        staging = root / "staging"
        staging.mkdir()

        unpacked = read_pack(io.BytesIO(out.read_bytes()), staging)

        assert unpacked.version == (1 if len(chain) == 1 else 2)
        for link, src in zip(unpacked.links, links, strict=True):
            for name in ("vmstate", "memory.bin", "rootfs.ext4"):
                assert (src.directory / name).exists() == (link.directory / name).exists()
                if (src.directory / name).exists():
                    assert same_file(src.directory / name, link.directory / name)
            assert json.loads((link.directory / "snapshot.json").read_text())["memory"].endswith(
                f"{link.tag}/memory.bin"
            )
