"""read_pack extracts honest packs from any writer and refuses hostile ones without leaving a trace."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from manifest.forkd_pack import CorruptPack, PackError, PackLimits, PackLink, write_pack
from manifest.forkd_unpack import read_pack, read_pack_manifest, rewrite_snapshot_json_paths

from .hostile_packs import (
    BASE_FILES,
    CHAIN,
    compress,
    gnu_member_with_times,
    hostile_cases,
    manifest_v1,
    manifest_v2,
    member,
    pack,
    python_pax_tar,
    sha256,
    v1_pack,
    v2_members,
)

CASES = hostile_cases()


@pytest.fixture
def staging(tmp_path: Path) -> Path:
    """A staging dir that already holds someone else's file, which must survive."""
    path = tmp_path / "staging"
    path.mkdir()
    (path / "keep.txt").write_text("not ours")
    return path


def only_sentinel_left(staging: Path) -> bool:
    return [p.name for p in staging.iterdir()] == ["keep.txt"] and (staging / "keep.txt").read_text() == "not ours"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_pack_is_refused_with_a_clear_message_and_leaves_nothing(case, staging: Path, tmp_path: Path) -> None:
    source = tmp_path / "hostile.tar.zst"
    source.write_bytes(case.pack)

    with pytest.raises(case.error) as info:
        read_pack(source, staging, limits=case.limits)

    message = str(info.value)
    assert all(fragment in message for fragment in case.says), message
    assert only_sentinel_left(staging)
    assert not (tmp_path / "x").exists() and not (tmp_path / "evil").exists()


def test_every_hostile_case_is_a_pack_error() -> None:
    assert all(issubclass(case.error, PackError) and issubclass(case.error, ValueError) for case in CASES)


def test_honest_baseline_of_the_corpus_is_accepted(staging: Path) -> None:
    """The corpus mutates these packs; they must pass, or the hostile tests prove nothing."""
    (staging / "v1").mkdir()
    unpacked = read_pack(io.BytesIO(v1_pack()), staging / "v1")
    assert (staging / "v1" / "base" / "memory.bin").read_bytes() == BASE_FILES["memory.bin"]
    assert unpacked.links[0].files[-1].sha256 == sha256(BASE_FILES["memory.bin"])
    (staging / "v2").mkdir()
    chain = pack(member("manifest.toml", manifest_v2(CHAIN)), *v2_members(CHAIN))
    unpacked = read_pack(io.BytesIO(chain), staging / "v2")
    assert [link.tag for link in unpacked.links] == ["base", "numpy", "pandas"]
    assert (staging / "v2" / "pandas" / "memory.bin").read_bytes() == CHAIN[2][2]["memory.bin"]


def test_hand_rolled_v2_with_docs_inline_tables_and_python_pax_tar(staging: Path) -> None:
    entries = [("manifest.toml", manifest_v2(CHAIN))] + [
        (f"{tag}/{p}", d) for tag, _, files in CHAIN for p, d in files.items()
    ]
    unpacked = read_pack(io.BytesIO(compress(python_pax_tar(entries))), staging)

    assert unpacked.version == 2
    assert unpacked.tag == "deeplethe/pandas"  # informational; links use the chain tags
    assert [(link.tag, link.parent_tag) for link in unpacked.links] == [(t, p) for t, p, _ in CHAIN]
    for tag, _, files in CHAIN:
        for name, data in files.items():
            assert (staging / tag / name).read_bytes() == data
        assert json.loads((staging / tag / "snapshot.json").read_text())["vmstate"].endswith(f"{tag}/vmstate")


def test_hand_rolled_v1_with_array_of_tables_and_gnu_headers_with_times(staging: Path) -> None:
    files = {**BASE_FILES, "rootfs.ext4": b"ext4-image" * 100}
    raw = gnu_member_with_times("manifest.toml", manifest_v1(files, tag="py.base")) + b"".join(
        gnu_member_with_times(name, data) for name, data in files.items()
    )
    unpacked = read_pack(io.BytesIO(compress(raw + b"\0" * 1024)), staging)

    assert unpacked.tag == "py.base" and unpacked.links[0].directory == staging / "py.base"
    for name in ("vmstate", "memory.bin", "rootfs.ext4"):
        assert (staging / "py.base" / name).read_bytes() == files[name]


def test_unknown_toml_keys_are_tolerated(staging: Path) -> None:
    manifest = manifest_v1(BASE_FILES, extra='signature = "sig"\n[future]\nx = 1\n')
    manifest = manifest.replace(b'sha256 = "', b'compression = "none"\nsha256 = "', 1)
    data = pack(member("manifest.toml", manifest), *(member(p, d) for p, d in BASE_FILES.items()))
    assert read_pack(io.BytesIO(data), staging).version == 1


def test_rootfs_target_path_is_data_never_a_path(staging: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim" / "rootfs.ext4"
    rootfs = f'[rootfs]\ntarget_path = "{target}"\nsha256 = "{"ab" * 32}"\nsize = 10\n'
    data = pack(member("manifest.toml", manifest_v1(BASE_FILES) + rootfs.encode()),
                *(member(p, d) for p, d in BASE_FILES.items()))  # fmt: skip

    unpacked = read_pack(io.BytesIO(data), staging)

    assert unpacked.rootfs == {"target_path": str(target), "sha256": "ab" * 32, "size": 10}
    assert not (tmp_path / "victim").exists()
    assert sorted(p.name for p in (staging / "base").iterdir()) == ["memory.bin", "snapshot.json", "vmstate"]


def test_snapshot_json_paths_point_at_the_extracted_files_and_unknown_fields_survive(staging: Path) -> None:
    files = {**BASE_FILES, "snapshot.json": json.dumps(
        {"vmstate": "/etc/passwd", "memory": "../../x", "volumes": [{"host_path": "/h", "guest_path": "/g", "read_only": True}],
         "rootfs": "/var/cache/forkd/py.ext4", "future_field": [1, 2]}).encode()}  # fmt: skip
    read_pack(io.BytesIO(v1_pack(files)), staging)

    doc = json.loads((staging / "base" / "snapshot.json").read_text())
    base = (staging / "base").absolute()
    assert doc["vmstate"] == str(base / "vmstate") and doc["memory"] == str(base / "memory.bin")
    assert doc["future_field"] == [1, 2] and doc["rootfs"] == "/var/cache/forkd/py.ext4"
    assert doc["volumes"] == [{"host_path": "/h", "guest_path": "/g", "read_only": True}]


def test_rewrite_snapshot_json_paths_after_a_rename(staging: Path, tmp_path: Path) -> None:
    read_pack(io.BytesIO(v1_pack()), staging)
    final = tmp_path / "store" / "base"
    final.parent.mkdir()
    os.rename(staging / "base", final)

    rewrite_snapshot_json_paths(final)

    doc = json.loads((final / "snapshot.json").read_text())
    assert (doc["vmstate"], doc["memory"]) == (str(final / "vmstate"), str(final / "memory.bin"))
    assert sorted(p.name for p in final.iterdir()) == ["memory.bin", "snapshot.json", "vmstate"]


def test_rewrite_snapshot_json_paths_refuses_non_objects(tmp_path: Path) -> None:
    (tmp_path / "snapshot.json").write_text("[1, 2]")
    with pytest.raises(CorruptPack, match="not a JSON object"):
        rewrite_snapshot_json_paths(tmp_path)


def test_v1_without_snapshot_json_gets_forkds_minimal_one(staging: Path) -> None:
    files = {k: v for k, v in BASE_FILES.items() if k != "snapshot.json"}
    unpacked = read_pack(io.BytesIO(v1_pack(files)), staging)
    doc = json.loads((staging / "base" / "snapshot.json").read_text())
    assert doc == {"vmstate": str((staging / "base").absolute() / "vmstate"),
                   "memory": str((staging / "base").absolute() / "memory.bin"), "volumes": []}  # fmt: skip
    assert [f.path for f in unpacked.links[0].files] == ["vmstate", "memory.bin"]


def test_missing_staging_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="staging"):
        read_pack(io.BytesIO(v1_pack()), tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_existing_link_directory_is_never_merged_into(staging: Path) -> None:
    chain = pack(member("manifest.toml", manifest_v2(CHAIN)), *v2_members(CHAIN))
    (staging / "numpy").mkdir()
    (staging / "numpy" / "vmstate").write_text("someone else's")

    with pytest.raises(FileExistsError):
        read_pack(io.BytesIO(chain), staging)

    assert sorted(p.name for p in staging.iterdir()) == ["keep.txt", "numpy"]
    assert (staging / "numpy" / "vmstate").read_text() == "someone else's"


def test_read_pack_manifest_extracts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "chain.tar.zst"
    path.write_bytes(pack(member("manifest.toml", manifest_v2(CHAIN)), *v2_members(CHAIN)))
    info = read_pack_manifest(path)
    assert [link.tag for link in info.links] == ["base", "numpy", "pandas"]
    assert [link.directory for link in info.links] == [Path("base"), Path("numpy"), Path("pandas")]
    assert info.links[2].files[1].sha256 == sha256(CHAIN[2][2]["memory.bin"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.tar.zst"]


def test_concatenated_zstd_frames_are_one_stream(staging: Path) -> None:
    tar = member("manifest.toml", manifest_v1(BASE_FILES)) + b"".join(member(p, d) for p, d in BASE_FILES.items())
    cut = len(tar) // 3
    data = compress(tar[:cut]) + compress(tar[cut:] + b"\0" * 1024)
    assert read_pack(io.BytesIO(data), staging).links[0].tag == "base"


def test_zero_memory_is_extracted_sparse_and_hashed(staging: Path, tmp_path: Path) -> None:
    memory = bytes(8 << 20)
    files = {"vmstate": b"v", "memory.bin": memory}
    read_pack(io.BytesIO(v1_pack(files)), staging)
    extracted = staging / "base" / "memory.bin"
    assert extracted.stat().st_size == len(memory) and extracted.read_bytes() == memory
    probe = tmp_path / "probe"
    with open(probe, "wb") as f:
        f.truncate(8 << 20)
    if probe.stat().st_blocks == 0:  # this filesystem supports holes
        assert extracted.stat().st_blocks * 512 < (1 << 20)


def test_written_pack_read_through_a_stream_and_a_path_agree(staging: Path, tmp_path: Path) -> None:
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "vmstate").write_bytes(b"v")
    (src / "memory.bin").write_bytes(b"m" * 10)
    out = write_pack([PackLink("a", src)], tmp_path / "a.tar.zst")
    other = tmp_path / "other"
    other.mkdir()
    with open(out, "rb") as stream:
        assert read_pack(stream, other).links[0].files == read_pack(out, staging).links[0].files


def test_limits_bound_declared_sizes_before_extraction(staging: Path) -> None:
    with pytest.raises(PackError):
        read_pack(io.BytesIO(v1_pack()), staging, limits=PackLimits(max_manifest_bytes=100))
    assert only_sentinel_left(staging)
