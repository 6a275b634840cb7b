"""forkd_client/images/apply.py: the OCI layer rules, applied into a real directory (as root)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from forkd_client.images.apply import LayerInput, apply_layers
from forkd_client.images.errors import ImageDigestMismatch
from tests.forkd_client.images.ocibuild import CAP_NET_RAW, MTIME, Entry, compress, layer_tar, sha256

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="applying layers keeps ownership: needs root")


def apply(tmp_path: Path, *layers: list[Entry], compression: str = "gzip", check_diff_ids: bool = True):
    inputs = []
    for index, entries in enumerate(layers):
        tar = layer_tar(entries)
        path = tmp_path / f"layer{index}"
        path.write_bytes(compress(tar, compression))
        inputs.append(LayerInput(path, f"layer{index}", sha256(tar) if check_diff_ids else None))
    tree = tmp_path / "tree"
    return tree, apply_layers(inputs, tree)


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_files_dirs_modes_owners_and_times_are_kept(tmp_path, compression):
    tree, report = apply(
        tmp_path,
        [
            Entry.dir("usr", mode=0o755),
            Entry.dir("usr/bin", mode=0o755),
            Entry.file("usr/bin/su", b"#!su", mode=0o4755),
            Entry.file("usr/bin/wall", b"wall", mode=0o2755, gid=5),
            Entry.dir("tmp", mode=0o1777),
            Entry.file("home.txt", b"x" * 5000, mode=0o640, uid=1000, gid=1000, mtime=1_600_000_000),
            Entry.symlink("bin", "usr/bin", uid=7, gid=8),
        ],
        compression=compression,
    )
    su = os.lstat(tree / "usr/bin/su")
    assert stat.S_IMODE(su.st_mode) == 0o4755 and su.st_uid == 0
    assert (
        stat.S_IMODE(os.lstat(tree / "usr/bin/wall").st_mode) == 0o2755 and os.lstat(tree / "usr/bin/wall").st_gid == 5
    )
    assert stat.S_IMODE(os.lstat(tree / "tmp").st_mode) == 0o1777
    home = os.lstat(tree / "home.txt")
    assert (home.st_uid, home.st_gid, stat.S_IMODE(home.st_mode), home.st_mtime) == (1000, 1000, 0o640, 1_600_000_000)
    assert (tree / "home.txt").read_bytes() == b"x" * 5000
    link = os.lstat(tree / "bin")
    assert (
        stat.S_ISLNK(link.st_mode) and os.readlink(tree / "bin") == "usr/bin" and (link.st_uid, link.st_gid) == (7, 8)
    )
    assert os.lstat(tree / "usr").st_mtime == MTIME  # adding usr/bin did not move it
    assert report.entries == 7 and report.unpacked_bytes == 4 + 4 + 5000


def test_whiteouts_remove_lower_entries_and_opaque_dirs_empty_them(tmp_path):
    lower = [
        Entry.dir("etc"),
        Entry.file("etc/keep", b"k"),
        Entry.file("etc/gone", b"g"),
        Entry.dir("etc/sub"),
        Entry.file("etc/sub/deep", b"d"),
        Entry.dir("var"),
        Entry.dir("var/lib"),
        Entry.file("var/lib/old", b"o"),
        Entry.dir("var/lib/dir"),
        Entry.file("var/lib/dir/x", b"x"),
    ]
    upper = [
        Entry.whiteout("etc/gone"),
        Entry.whiteout("etc/sub"),
        Entry.whiteout("etc/never-existed"),
        Entry.file("var/lib/new", b"n"),  # before the opaque marker in tar order: survives it
        Entry.opaque("var/lib"),
        Entry.dir("var/lib/dir"),  # re-declared in this layer, but its lower content is still hidden
        Entry.file("var/lib/dir/y", b"y"),
    ]
    tree, _ = apply(tmp_path, lower, upper)
    assert sorted(os.listdir(tree / "etc")) == ["keep"]
    assert sorted(os.listdir(tree / "var/lib")) == ["dir", "new"]
    assert sorted(os.listdir(tree / "var/lib/dir")) == ["y"]
    assert not any(name.startswith(".wh.") for _, dirs, files in os.walk(tree) for name in dirs + files)


def test_a_whiteout_does_not_hide_what_its_own_layer_adds(tmp_path):
    tree, _ = apply(
        tmp_path, [Entry.dir("a"), Entry.file("a/f", b"lower")], [Entry.file("a/f", b"upper"), Entry.whiteout("a/f")]
    )
    assert (tree / "a/f").read_bytes() == b"upper"


def test_hard_links_share_an_inode_within_and_across_layers(tmp_path):
    tree, _ = apply(
        tmp_path,
        [Entry.dir("bin"), Entry.file("bin/busybox", b"bb", mode=0o755), Entry.hardlink("bin/sh", "bin/busybox")],
        [Entry.hardlink("bin/ls", "/bin/busybox")],
    )
    inodes = {os.lstat(tree / "bin" / n).st_ino for n in ("busybox", "sh", "ls")}
    assert len(inodes) == 1 and os.lstat(tree / "bin/busybox").st_nlink == 3


def test_entries_under_a_symlinked_parent_land_inside_the_root(tmp_path):
    tree, _ = apply(
        tmp_path,
        [
            Entry.dir("usr"),
            Entry.dir("usr/lib"),
            Entry.symlink("lib", "/usr/lib"),
            Entry.dir("var"),
            Entry.symlink("var/run", "../run"),
        ],
        [Entry.file("lib/libc.so", b"libc"), Entry.file("var/run/pid", b"1")],
    )
    assert (tree / "usr/lib/libc.so").read_bytes() == b"libc"
    assert (tree / "run/pid").read_bytes() == b"1"  # ../run from var: created inside the root
    assert stat.S_ISLNK(os.lstat(tree / "lib").st_mode)


def test_replacing_types_and_merging_directories(tmp_path):
    tree, _ = apply(
        tmp_path,
        [
            Entry.dir("d", mode=0o700),
            Entry.file("d/inner", b"i"),
            Entry.file("f", b"file"),
            Entry.dir("x"),
            Entry.file("x/y", b"y"),
        ],
        [Entry.dir("d", mode=0o755, uid=3), Entry.symlink("f", "d"), Entry.file("x", b"now a file")],
    )
    assert (tree / "d/inner").read_bytes() == b"i"  # a directory over a directory keeps its contents
    assert stat.S_IMODE(os.lstat(tree / "d").st_mode) == 0o755 and os.lstat(tree / "d").st_uid == 3
    assert os.readlink(tree / "f") == "d"
    assert (tree / "x").read_bytes() == b"now a file"


def test_xattrs_are_kept_and_devices_are_skipped_with_a_note(tmp_path):
    tree, report = apply(
        tmp_path,
        [
            Entry.dir("bin"),
            Entry.file(
                "bin/ping", b"ping", mode=0o755, xattrs={"security.capability": CAP_NET_RAW, "user.origin": b"test"}
            ),
            Entry.dir("dev"),
            Entry("dev/null", "chr", mode=0o666),
            Entry("dev/sda", "blk", mode=0o660),
            Entry("run.fifo", "fifo"),
            Entry.file("odd", b"", xattrs={"weird.ns": b"1"}),
        ],
    )
    assert os.getxattr(tree / "bin/ping", "security.capability") == CAP_NET_RAW
    assert os.getxattr(tree / "bin/ping", "user.origin") == b"test"
    assert os.listdir(tree / "dev") == [] and not (tree / "run.fifo").exists()
    assert "skipped character device /dev/null (layer 0)" in report.notes
    assert "skipped block device /dev/sda (layer 0)" in report.notes
    assert "skipped fifo /run.fifo (layer 0)" in report.notes
    assert any("'weird.ns'" in note for note in report.notes)
    assert os.listxattr(tree / "odd") == []


def test_implicit_parents_and_the_root_get_fixed_metadata(tmp_path):
    tree, _ = apply(tmp_path, [Entry.file("a/b/c", b"c")])
    for path in (tree, tree / "a", tree / "a/b"):
        s = os.lstat(path)
        assert (stat.S_IMODE(s.st_mode), s.st_uid, s.st_gid, s.st_mtime) == (0o755, 0, 0, 0)


def test_a_wrong_diff_id_is_refused_and_nothing_is_left(tmp_path):
    tar = layer_tar([Entry.file("a", b"a")])
    (tmp_path / "l").write_bytes(compress(tar, "gzip"))
    with pytest.raises(ImageDigestMismatch, match="layer 0"):
        apply_layers([LayerInput(tmp_path / "l", "l", sha256(b"something else"))], tmp_path / "tree")
    assert sorted(os.listdir(tmp_path)) == ["l"]


def test_progress_reports_apply_bytes(tmp_path):
    tar = layer_tar([Entry.file("big", os.urandom(10 << 20))])
    (tmp_path / "l").write_bytes(tar)
    seen = []
    apply_layers([LayerInput(tmp_path / "l")], tmp_path / "tree", progress=lambda *a: seen.append(a))
    assert seen[-1] == ("apply", len(tar), len(tar))
    assert all(phase == "apply" for phase, _, _ in seen) and len(seen) >= 2


def test_a_whiteout_under_a_file_hides_nothing(tmp_path):
    tree, _ = apply(tmp_path, [Entry.file("a", b"file")], [Entry.whiteout("a/b")])
    assert (tree / "a").read_bytes() == b"file"
