"""forkd_client/images/ext4.py and ext4times.py: sized, sparse, deterministic ext4 images built without
mounting, read back with e2fsprogs' own debugfs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from forkd_client.images.apply import LayerInput, apply_layers
from forkd_client.images.errors import RootfsTooSmall
from forkd_client.images.ext4 import MiB, build_ext4, minimum_bytes, scan_tree
from forkd_client.images.ext4times import crc32c_raw
from tests.forkd_client.images.ocibuild import CAP_NET_RAW, Entry, layer_tar

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the trees keep ownership: needs root")

ENTRIES = [
    Entry.dir("etc"),
    Entry.file("etc/hostname", b"guest\n"),
    Entry.dir("usr"),
    Entry.dir("usr/bin"),
    Entry.file("usr/bin/tool", b"\x7fELF" + os.urandom(100_000), mode=0o4755),
    Entry.hardlink("usr/bin/tool2", "usr/bin/tool"),
    Entry.file(
        "usr/bin/ping", b"ping", mode=0o755, xattrs={"security.capability": CAP_NET_RAW, "user.a": b"1", "user.b": b"2"}
    ),
    Entry.symlink("usr/bin/long", "/" + "x" * 100),
    Entry.symlink("bin", "usr/bin"),
    Entry.dir("many"),
    *[Entry.file(f"many/file-{i:04d}-{'y' * (i % 40)}", f"{i}".encode(), mtime=1_600_000_000 + i) for i in range(400)],
    Entry.file("zeros", bytes(1 << 20) + b"x", mode=0o600, uid=1000, gid=1000),
    Entry.dir("tmp", mode=0o1777),
]


def extract(tmp_path: Path, name: str, entries: list[Entry]) -> Path:
    (tmp_path / f"{name}.tar").write_bytes(layer_tar(entries))
    apply_layers([LayerInput(tmp_path / f"{name}.tar")], tmp_path / name)
    return tmp_path / name


def digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def debugfs(image: Path, request: str) -> str:
    return subprocess.run(
        ["debugfs", "-R", request, str(image)], capture_output=True, text=True, timeout=60, check=True
    ).stdout


@pytest.mark.integration  # mkfs.ext4 builds the image, debugfs reads it: a helper program (docs/testing.md)
def test_two_extractions_of_one_image_give_byte_identical_images(tmp_path):
    first = extract(tmp_path, "a", ENTRIES)
    time.sleep(1.1)  # a different ctime for every file of the second extraction
    # the same entries in another order: the host creates (and lists) them differently
    many = ENTRIES[9:-2]
    order = [
        *ENTRIES[:4],
        ENTRIES[6],
        ENTRIES[4],
        ENTRIES[5],
        ENTRIES[8],
        ENTRIES[7],
        ENTRIES[-1],
        ENTRIES[-2],
        *reversed(many),
    ]
    second = extract(tmp_path, "b", order)
    images = []
    for tree in (first, second):
        work = tmp_path / f"work-{tree.name}"
        work.mkdir()
        images.append(build_ext4(tree, work / "rootfs.ext4", seed=b"sha256:same", workdir=work))
    assert images[0].size == images[1].size
    assert digest(images[0].path) == digest(images[1].path)
    assert os.stat(images[0].path).st_blocks * 512 < images[0].size // 4  # sparse
    # and a different seed gives another filesystem (UUID, checksums), so the seed is what decides
    work = tmp_path / "work-c"
    work.mkdir()
    other = build_ext4(first, work / "rootfs.ext4", seed=b"sha256:other", workdir=work)
    assert digest(other.path) != digest(images[0].path)


@pytest.mark.integration  # mkfs.ext4 builds the image, debugfs reads it: a helper program (docs/testing.md)
def test_the_image_holds_the_tree_with_fixed_times(tmp_path):
    tree = extract(tmp_path, "t", ENTRIES)
    work = tmp_path / "work"
    work.mkdir()
    image = build_ext4(tree, work / "rootfs.ext4", seed=b"s", workdir=work).path
    assert debugfs(image, "cat /etc/hostname") == "guest\n"
    tool = debugfs(image, "stat /usr/bin/tool")
    assert "Links: 2" in tool and "Mode:  04755" in tool
    for line in ("ctime", "atime", "mtime"):
        assert f"{line}: 0x6553f100:00000000" in tool  # 1700000000: atime and ctime were rewritten from mtime
    assert "Size: 101" in debugfs(image, "stat /usr/bin/long")
    assert "security.capability" in debugfs(image, "ea_list /usr/bin/ping")
    assert "User:  1000   Group:  1000" in debugfs(image, "stat /zeros")
    check = subprocess.run(["e2fsck", "-fn", str(image)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout


@pytest.mark.integration  # mkfs.ext4 builds the image, debugfs reads it: a helper program (docs/testing.md)
def test_an_explicit_size_too_small_is_refused_and_the_minimum_fits(tmp_path):
    tree = extract(tmp_path, "t", ENTRIES)
    minimum = minimum_bytes(scan_tree(tree))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(RootfsTooSmall, match=f"needs at least {minimum // MiB} MiB") as caught:
        build_ext4(tree, work / "small.ext4", seed=b"s", size_bytes=minimum - MiB, workdir=work)
    assert caught.value.needed_mib == minimum // MiB and not (work / "small.ext4").exists()
    built = build_ext4(tree, work / "exact.ext4", seed=b"s", size_bytes=minimum, workdir=work)
    assert built.size == minimum


@pytest.mark.integration  # mkfs.ext4 builds the image, debugfs reads it: a helper program (docs/testing.md)
def test_the_default_size_leaves_headroom(tmp_path):
    tree = extract(tmp_path, "t", ENTRIES)
    work = tmp_path / "work"
    work.mkdir()
    built = build_ext4(tree, work / "rootfs.ext4", seed=b"s", workdir=work)
    assert built.size >= built.minimum + 512 * MiB and built.size % (64 * MiB) == 0


def test_crc32c_is_the_raw_castagnoli_register():
    assert ~crc32c_raw(0xFFFFFFFF, b"123456789") & 0xFFFFFFFF == 0xE3069283
    assert crc32c_raw(crc32c_raw(0x1234, b"abc"), b"def") == crc32c_raw(0x1234, b"abcdef")
