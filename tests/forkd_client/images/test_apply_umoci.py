"""The layer applier against an independent implementation: umoci (Debian's ``umoci raw unpack``, the OCI
project's own unpacker) extracts the same ``oci:`` layouts, and the two trees must agree file by file:
type, mode, owner, size, content, link target, hard-link groups, xattrs and mtimes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from forkd_client.images.apply import LayerInput, apply_layers
from tests.forkd_client.images.ocibuild import CAP_NET_RAW, Entry, layer_tar, tree_listing, write_layout

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="both extractions keep ownership: needs root"),
    pytest.mark.skipif(shutil.which("umoci") is None, reason="needs umoci (scripts/install-system-deps.sh)"),
]

LAYERS = [
    [
        Entry.dir("etc"),
        Entry.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
        Entry.file("etc/shadow", b"root:*:1::::::\n", mode=0o640, gid=42),
        Entry.file("etc/gone", b"removed later"),
        Entry.dir("etc/sub"),
        Entry.file("etc/sub/deep", b"deep"),
        Entry.dir("usr"),
        Entry.dir("usr/bin"),
        Entry.file("usr/bin/busybox", b"\x7fELF" + bytes(5000) + b"tail", mode=0o755),
        Entry.hardlink("usr/bin/sh", "usr/bin/busybox"),
        Entry.file("usr/bin/su", b"su", mode=0o4755),
        Entry.file("usr/bin/ping", b"ping", mode=0o755, xattrs={"security.capability": CAP_NET_RAW}),
        Entry.symlink("bin", "usr/bin"),
        Entry.dir("tmp", mode=0o1777),
        Entry.dir("home"),
        Entry.dir("home/user", mode=0o750, uid=1000, gid=1000),
        Entry.file("home/user/.profile", b"export A=1\n", mode=0o600, uid=1000, gid=1000, xattrs={"user.tag": b"x"}),
        Entry.dir("var"),
        Entry.dir("var/cache"),
        Entry.file("var/cache/a", b"a"),
        Entry.dir("var/cache/d"),
        Entry.file("var/cache/d/b", b"b"),
        Entry.file("empty", b""),
        Entry.file("sparse", bytes(3 << 20) + b"end"),
    ],
    [
        Entry.whiteout("etc/gone"),
        Entry.whiteout("etc/sub"),
        Entry.file("bin/added", b"through the bin symlink", mode=0o755),
        Entry.hardlink("usr/bin/ls", "usr/bin/busybox"),
        Entry.file("var/cache/new", b"new"),
        Entry.opaque("var/cache"),
        Entry.file("etc/passwd", b"root:x:0:0:root:/root:/bin/bash\n", mode=0o644, mtime=1_710_000_000),
        Entry.symlink("etc/mtab", "/proc/self/mounts"),
        Entry.dir("home/user", mode=0o700, uid=1000, gid=1000),
    ],
    [
        Entry.file("usr/bin/su", b"su2", mode=0o4711, uid=0, gid=0),
        Entry.whiteout("tmp"),
        Entry.dir("tmp", mode=0o1777, mtime=1_720_000_000),
        Entry.file("tmp/.keep", b""),
    ],
]


def umoci_unpack(layout: Path, tag: str, out: Path) -> None:
    result = subprocess.run(
        ["umoci", "raw", "unpack", "--image", f"{layout}:{tag}", str(out)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr


def ours(layout: Path, digests: list[str], diff_ids: list[str], out: Path) -> None:
    layers = [
        LayerInput(layout / "blobs/sha256" / d.removeprefix("sha256:"), d, i)
        for d, i in zip(digests, diff_ids, strict=True)
    ]
    apply_layers(layers, out)


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_the_same_tree_as_umoci_file_by_file(tmp_path, compression):
    tars = [layer_tar(entries) for entries in LAYERS]
    # umoci 0.4.7 reads gzip and plain layers only: its reference comes from the gzip layout of the same tars
    reference_layout = tmp_path / "oci-gzip"
    write_layout(reference_layout, tars, tag="t", compression="gzip")
    umoci_unpack(reference_layout, "t", tmp_path / "reference")
    layout = tmp_path / "oci"
    info = write_layout(layout, tars, tag="t", compression=compression)
    ours(layout, info.layer_digests, info.diff_ids, tmp_path / "mine")
    expected, actual = tree_listing(tmp_path / "reference"), tree_listing(tmp_path / "mine")
    assert sorted(actual) == sorted(expected)
    for path in expected:
        assert actual[path] == expected[path], path
    # the cases are really there (a listing that lost them would agree trivially)
    assert actual["/usr/bin/ls"]["links"] == ["/usr/bin/busybox", "/usr/bin/ls", "/usr/bin/sh"]
    assert "/etc/gone" not in actual and "/etc/sub" not in actual and "/var/cache/a" not in actual
    assert actual["/var/cache/new"]["type"] == "file" and actual["/usr/bin/added"]["type"] == "file"
    assert actual["/usr/bin/ping"]["xattrs"] == {"security.capability": CAP_NET_RAW.hex()}
    assert actual["/usr/bin/su"]["mode"] == "0o4711" and actual["/tmp"]["mode"] == "0o1777"
    assert actual["/home/user/.profile"]["uid"] == 1000
