"""Hostile layers: each is refused with its typed error naming the entry, and nothing is left behind
(no tree, no partial directory), and nothing is written outside the root."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from forkd_client.images.apply import LayerInput, apply_layers
from forkd_client.images.errors import CorruptLayer, LayerRejected, LimitExceeded, UnsafePath
from forkd_client.images.limits import DEFAULT_LIMITS
from tests.forkd_client.images.ocibuild import Entry, compress, layer_tar

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="applying layers keeps ownership: needs root")

L = DEFAULT_LIMITS
BASE = [Entry.dir("etc"), Entry.file("etc/passwd", b"root:x:0:0\n"), Entry.symlink("etc/link", "passwd")]

CASES = {
    "dotdot name": ([[Entry.file("../outside/pwned", b"x")]], L, UnsafePath, "'..'"),
    "dotdot inside a name": ([[Entry.dir("a"), Entry.file("a/../../outside/pwned", b"x")]], L, UnsafePath, "'..'"),
    "parent symlink climbing out": (
        [[Entry.symlink("up", ".."), Entry.file("up/outside/pwned", b"x")]],
        L,
        UnsafePath,
        "climbs out",
    ),
    "parent symlink climbing out later": (
        [[Entry.dir("d"), Entry.symlink("d/up", "../../..")], [Entry.file("d/up/pwned", b"x")]],
        L,
        UnsafePath,
        "climbs out",
    ),
    "symlink loop": (
        [[Entry.symlink("a", "b"), Entry.symlink("b", "a"), Entry.file("a/x", b"x")]],
        L,
        UnsafePath,
        "symlinks",
    ),
    "hard link climbing": ([[*BASE, Entry.hardlink("h", "../outside/secret")]], L, UnsafePath, "'..'"),
    "hard link through a climbing symlink": (
        [[*BASE, Entry.symlink("up", ".."), Entry.hardlink("h", "up/outside/secret")]],
        L,
        UnsafePath,
        "climbs out",
    ),
    "hard link to a missing file": ([[*BASE, Entry.hardlink("h", "/etc/shadow")]], L, UnsafePath, "not in the tree"),
    "hard link to a directory": ([[*BASE, Entry.hardlink("h", "etc")]], L, UnsafePath, "not a regular file"),
    "hard link to a symlink": ([[*BASE, Entry.hardlink("h", "etc/link")]], L, UnsafePath, "not a regular file"),
    "root replaced by a file": ([[Entry.file("./", b"x")]], L, UnsafePath, "root directory"),
    "absurd declared size": ([[Entry.file("big", b"", declared_size=1 << 50)]], L, LimitExceeded, "max_unpacked_bytes"),
    "too many entries": (
        [[Entry.file(f"f{i}", b"") for i in range(11)]],
        L.replace(max_entries=10),
        LimitExceeded,
        "max_entries",
    ),
    "name component too long": ([[Entry.file("x" * 256, b"")]], L, LimitExceeded, "max_name_bytes"),
    "name too long": ([[Entry.file("/".join(["d" * 200] * 22), b"")]], L, LimitExceeded, "max_path_bytes"),
    "pax header too large": (
        [[Entry.file("f", b"", xattrs={"user.big": b"v" * 100_000})]],
        L.replace(max_header_bytes=65536),
        LimitExceeded,
        "max_header_bytes",
    ),
    "xattrs too large": (
        [[Entry.file("f", b"", xattrs={"user.big": b"v" * 70_000})]],
        L.replace(max_xattr_bytes=65536),
        LimitExceeded,
        "max_xattr_bytes",
    ),
    "uid out of range": ([[Entry.file("f", b"", uid=2**33)]], L, LayerRejected, "uid"),
    "too many layers": ([[Entry.file("a", b"")]] * 3, L.replace(max_layers=2), LimitExceeded, "max_layers"),
    "too many unpacked bytes": (
        [[Entry.file("a", b"a" * 3000), Entry.file("b", b"b" * 3000)]],
        L.replace(max_unpacked_bytes=5000),
        LimitExceeded,
        "max_unpacked_bytes",
    ),
}


def _check_nothing_left(tmp_path: Path, layer_names: list[str]) -> None:
    assert sorted(os.listdir(tmp_path)) == sorted([*layer_names, "outside", "work"])
    assert os.listdir(tmp_path / "work") == []
    assert os.listdir(tmp_path / "outside") == ["secret"]


def _run(tmp_path: Path, blobs: list[bytes], limits=L):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("do not touch")
    (tmp_path / "work").mkdir()
    names = []
    for i, blob in enumerate(blobs):
        (tmp_path / f"layer{i}").write_bytes(blob)
        names.append(f"layer{i}")
    try:
        apply_layers([LayerInput(tmp_path / n) for n in names], tmp_path / "work" / "tree", limits=limits)
    finally:
        _check_nothing_left(tmp_path, names)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_layer_is_refused_and_leaves_nothing(tmp_path, case):
    layers, limits, error, match = CASES[case]
    with pytest.raises(error, match=match) as caught:
        _run(tmp_path, [compress(layer_tar(entries), "gzip") for entries in layers], limits)
    if error is not LimitExceeded or match != "max_layers":
        assert "layer " in str(caught.value)  # the message says where


def test_a_decompression_bomb_is_stopped_by_the_bytes_produced(tmp_path):
    # the tar declares one small file; 64 MiB of zeros follow its end-of-archive marker
    bomb = gzip.compress(layer_tar([Entry.file("small", b"s")]) + bytes(64 << 20), compresslevel=9)
    assert len(bomb) < 200_000
    with pytest.raises(LimitExceeded, match="max_decompressed_bytes"):
        _run(tmp_path, [bomb], L.replace(max_decompressed_bytes=8 << 20))


def test_a_file_bomb_is_stopped_by_the_bytes_produced(tmp_path):
    bomb = gzip.compress(layer_tar([Entry.file("zeros", bytes(64 << 20))]), compresslevel=9)
    with pytest.raises(LimitExceeded, match="max_decompressed_bytes"):
        _run(tmp_path, [bomb], L.replace(max_decompressed_bytes=8 << 20))


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"\x1f\x8b\x08\x00" + os.urandom(4000), "layer 0"),
        (b"\x28\xb5\x2f\xfd" + os.urandom(4000), "layer 0"),
        (os.urandom(4000), "layer 0"),
        (layer_tar([Entry.file("f", b"0123456789")])[:700], "layer 0"),  # truncated inside the file's data
    ],
    ids=["bad gzip", "bad zstd", "not a tar", "truncated"],
)
def test_corrupt_layers_are_refused(tmp_path, blob, match):
    with pytest.raises(CorruptLayer, match=match):
        _run(tmp_path, [blob])


def test_a_leading_slash_is_stripped_as_tar_does(tmp_path):
    (tmp_path / "l").write_bytes(layer_tar([Entry.dir("/etc"), Entry.file("/etc/hostname", b"h")]))
    apply_layers([LayerInput(tmp_path / "l")], tmp_path / "tree")
    assert (tmp_path / "tree/etc/hostname").read_bytes() == b"h"


def test_an_absolute_symlink_parent_resolves_inside_the_root(tmp_path):
    (tmp_path / "l").write_bytes(layer_tar([Entry.symlink("abs", "/"), Entry.file("abs/inside", b"i")]))
    apply_layers([LayerInput(tmp_path / "l")], tmp_path / "tree")
    assert (tmp_path / "tree/inside").read_bytes() == b"i"
    assert not Path("/inside").exists()


def _sparse_file(path: Path, regions: int) -> bytes:
    with open(path, "wb") as f:
        for i in range(regions):
            f.seek(i * 65536)
            f.write(b"data%05d" % i)
        f.truncate(regions * 65536)
    return path.read_bytes()


@pytest.mark.integration  # GNU tar writes the archive: a helper program (docs/testing.md)
@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
@pytest.mark.parametrize("fmt", ["gnu", "posix"])
def test_sparse_entries_apply_and_their_maps_are_bounded(tmp_path, fmt):
    src = tmp_path / "src"
    src.mkdir()
    content = _sparse_file(src / "holes", 200)
    subprocess.run(
        ["tar", f"--format={fmt}", "--sparse", "-C", str(src), "-cf", str(tmp_path / "l.tar"), "holes"], check=True
    )
    apply_layers([LayerInput(tmp_path / "l.tar")], tmp_path / "tree")
    assert (tmp_path / "tree/holes").read_bytes() == content
    with pytest.raises(LimitExceeded, match="sparse map"):
        apply_layers([LayerInput(tmp_path / "l.tar")], tmp_path / "tree2", limits=L.replace(max_header_bytes=24 * 100))
    assert not (tmp_path / "tree2").exists() and sorted(os.listdir(tmp_path)) == ["l.tar", "src", "tree"]
