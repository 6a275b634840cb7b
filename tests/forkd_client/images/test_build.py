"""forkd_client/images/build.py and cache.py: build_rootfs end to end from ``oci:`` layouts and
docker-archives, the cache (hits, invalidation, atomic publication), and nothing left on refusal."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from forkd_client.images import build_rootfs
from forkd_client.images.build import BASE_DIGEST, BASE_NAME, INDEX_DIGEST
from forkd_client.images.errors import InvalidSetting, ReservedPathInImage, RootfsTooSmall, UnsafePath
from tests.forkd_client.images.ocibuild import Entry, layer_tar, write_docker_archive, write_layout

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="building a rootfs keeps ownership: needs root")

BASE = [
    Entry.dir("bin"),
    Entry.file("bin/busybox", b"\x7fELF" + bytes(3000), mode=0o755),
    Entry.hardlink("bin/sh", "bin/busybox"),
    Entry.dir("etc"),
    Entry.file("etc/os-release", b"ID=test\n"),
    Entry.dir("dev"),
    Entry("dev/null", "chr", mode=0o666),
]
APP = [Entry.dir("srv"), Entry.file("srv/app.py", b"print('hi')\n")]
INJECT = {"agent": (b"#!/bin/sh\necho agent\n", 0o755)}


def debugfs_cat(image: Path, path: str) -> str:
    return subprocess.run(
        ["debugfs", "-R", f"cat {path}", str(image)], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def entries(cache: Path, sub: str) -> list[str]:
    return sorted(os.listdir(cache / sub)) if (cache / sub).exists() else []


@pytest.fixture
def layout(tmp_path: Path):
    info = write_layout(
        tmp_path / "oci",
        [layer_tar(BASE), layer_tar(APP)],
        tag="v1",
        env=["PATH=/bin", "GREETING=hello world"],
        workdir="/srv",
    )
    return tmp_path / "oci", info


@pytest.mark.integration  # builds the image with mkfs.ext4: a helper program (docs/testing.md)
def test_build_from_a_layout_then_hit_the_cache(tmp_path, layout):
    path, info = layout
    cache = tmp_path / "cache"
    phases = set()
    built = build_rootfs(f"oci:{path}:v1", inject=INJECT, cache_dir=cache, progress=lambda phase, *_: phases.add(phase))
    assert not built.cache_hit and built.path == cache / "images" / built.key / "rootfs.ext4"
    assert built.annotations == {BASE_DIGEST: info.manifest_digest, BASE_NAME: f"oci:{path}:v1"}
    assert built.env == ["PATH=/bin", "GREETING=hello world"] and built.workdir == "/srv" and built.has_shell
    assert built.notes == ["skipped character device /dev/null (layer 0)"]
    assert phases == {"download", "apply", "mkfs"}
    assert debugfs_cat(built.path, "/.forkd/env") == "export PATH='/bin'\nexport GREETING='hello world'\n"
    assert debugfs_cat(built.path, "/.forkd/agent") == "#!/bin/sh\necho agent\n"
    assert debugfs_cat(built.path, "/srv/app.py") == "print('hi')\n"
    assert entries(cache, "tmp") == []

    again = build_rootfs(f"oci:{path}:v1", inject=INJECT, cache_dir=cache)
    assert again.cache_hit and again.path == built.path and again.annotations == built.annotations and again.has_shell
    other = build_rootfs(f"oci:{path}:v1", inject={"agent": (b"v2", 0o755)}, cache_dir=cache)
    assert not other.cache_hit and other.key != built.key
    assert len(entries(cache, "images")) == 2


@pytest.mark.integration  # builds the image with mkfs.ext4: a helper program (docs/testing.md)
def test_a_cache_entry_whose_file_changed_is_rebuilt(tmp_path, layout):
    path, _ = layout
    cache = tmp_path / "cache"
    built = build_rootfs(f"oci:{path}:v1", cache_dir=cache)
    with open(built.path, "r+b") as f:
        f.write(b"garbage")
    os.utime(built.path, ns=(1, 1))
    rebuilt = build_rootfs(f"oci:{path}:v1", cache_dir=cache)
    assert not rebuilt.cache_hit and rebuilt.key == built.key
    assert build_rootfs(f"oci:{path}:v1", cache_dir=cache).cache_hit
    record = built.path.parent / "built.json"
    record.write_text(record.read_text().replace('"workdir"', '"renamed"'))
    assert not build_rootfs(f"oci:{path}:v1", cache_dir=cache).cache_hit


@pytest.mark.integration  # builds the image with mkfs.ext4: a helper program (docs/testing.md)
def test_an_index_records_its_digest(tmp_path):
    info = write_layout(
        tmp_path / "oci", [layer_tar(BASE)], tag="multi", platforms=[("linux", "arm64"), ("linux", "amd64")]
    )
    built = build_rootfs(f"oci:{tmp_path / 'oci'}:multi", cache_dir=tmp_path / "cache")
    assert built.annotations[BASE_DIGEST] == info.manifest_digest and built.annotations[INDEX_DIGEST] == info.top_digest


@pytest.mark.integration  # builds the image with mkfs.ext4: a helper program (docs/testing.md)
def test_from_a_docker_archive(tmp_path):
    image_id = write_docker_archive(tmp_path / "a.tar", [layer_tar(BASE), layer_tar(APP)], workdir="/srv")
    built = build_rootfs(f"docker-archive:{tmp_path / 'a.tar'}", cache_dir=tmp_path / "cache")
    assert built.annotations == {BASE_DIGEST: image_id, BASE_NAME: f"docker-archive:{tmp_path / 'a.tar'}"}
    assert debugfs_cat(built.path, "/.forkd/workdir") == "/srv\n"
    assert build_rootfs(f"docker-archive:{tmp_path / 'a.tar'}", cache_dir=tmp_path / "cache").cache_hit


def _chunks(path: Path, size: int = 64 << 10) -> list[bytes]:
    with open(path, "rb") as f:
        return list(iter(lambda: f.read(size), b""))


@pytest.mark.integration  # builds the image with mkfs.ext4: a helper program (docs/testing.md)
def test_one_image_under_two_names_shares_all_but_a_few_64k_chunks(tmp_path, layout):
    path, _ = layout
    shutil.copytree(path, tmp_path / "copy")
    a = build_rootfs(f"oci:{path}:v1", inject=INJECT, cache_dir=tmp_path / "cache")
    b = build_rootfs(f"oci:{tmp_path / 'copy'}:v1", inject=INJECT, cache_dir=tmp_path / "cache")
    assert a.key != b.key and a.size == b.size
    ca, cb = _chunks(a.path), _chunks(b.path)
    differing = sum(1 for x, y in zip(ca, cb, strict=True) if x != y)
    assert 0 < differing <= 4, differing  # /.forkd/image.json names its source: that block and its metadata


def test_refusals_leave_nothing_in_the_cache(tmp_path):
    cache = tmp_path / "cache"
    write_layout(tmp_path / "bad", [layer_tar([Entry.symlink("up", ".."), Entry.file("up/x", b"x")])], tag="v1")
    with pytest.raises(UnsafePath):
        build_rootfs(f"oci:{tmp_path / 'bad'}:v1", cache_dir=cache)
    write_layout(
        tmp_path / "reserved", [layer_tar([Entry.dir(".forkd"), Entry.file(".forkd/agent", b"mine")])], tag="v1"
    )
    with pytest.raises(ReservedPathInImage):
        build_rootfs(f"oci:{tmp_path / 'reserved'}:v1", cache_dir=cache)
    write_layout(tmp_path / "ok", [layer_tar(BASE)], tag="v1")
    with pytest.raises(RootfsTooSmall):
        build_rootfs(f"oci:{tmp_path / 'ok'}:v1", cache_dir=cache, size_mib=8)
    assert entries(cache, "images") == [] and entries(cache, "tmp") == []


@pytest.mark.parametrize("size", [0, -5, 1.5, True])
def test_a_bad_size_is_a_setting_error(tmp_path, layout, size):
    with pytest.raises(InvalidSetting, match="size_mib"):
        build_rootfs(f"oci:{layout[0]}:v1", cache_dir=tmp_path / "cache", size_mib=size)


@pytest.mark.integration  # builds the image with mkfs.ext4: a helper program (docs/testing.md)
def test_a_work_directory_left_by_a_killed_build_is_swept(tmp_path, layout):
    cache = tmp_path / "cache"
    stale = cache / "tmp" / "deadbeef"
    (stale / "tree").mkdir(parents=True)
    (stale / ".lock").touch()
    fresh = cache / "tmp" / "cafebabe"  # just made by another builder that has not locked it yet
    fresh.mkdir()
    (fresh / ".lock").touch()
    os.utime(stale, (1, 1))
    build_rootfs(f"oci:{layout[0]}:v1", cache_dir=cache)
    assert entries(cache, "tmp") == ["cafebabe"]


def test_the_cache_location_follows_the_environment(monkeypatch, tmp_path):
    from forkd_client.images.cache import cache_root

    assert cache_root({"FORKD_ROOTFS_CACHE": "/x/y"}) == Path("/x/y")
    assert cache_root({"XDG_CACHE_HOME": "/c"}) == Path("/c/forkd/rootfs")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root({}) == tmp_path / ".cache" / "forkd" / "rootfs"
