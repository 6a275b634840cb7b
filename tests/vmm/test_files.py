"""clone_file / move_file / merge_sparse keep holes and never leave partial files."""

from __future__ import annotations

import os
from pathlib import Path

from manifest.fileops import CloneMethod, clone_file
from vmm.files import merge_sparse, move_file

MIB = 1 << 20


def sparse_file(path: Path, size: int, writes: dict[int, bytes]) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in writes.items():
            f.seek(offset)
            f.write(data)
    return path


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_clone_copies_content_and_keeps_holes(tmp_path: Path) -> None:
    src = sparse_file(tmp_path / "src", 64 * MIB, {0: b"a" * 4096, 40 * MIB: b"b" * 8192})
    (tmp_path / "dst").write_bytes(b"an older file")
    how = clone_file(src, tmp_path / "dst", replace=True)
    assert how in set(CloneMethod)
    assert (tmp_path / "dst").read_bytes() == src.read_bytes()
    assert allocated(tmp_path / "dst") < 4 * MIB
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]  # no partial file left


def test_clone_is_independent_of_its_source(tmp_path: Path) -> None:
    src = sparse_file(tmp_path / "src", MIB, {0: b"old"})
    clone_file(src, tmp_path / "dst")
    sparse_file(tmp_path / "dst", MIB, {0: b"new"})
    assert src.read_bytes()[:3] == b"old"


def test_move_renames_within_a_filesystem(tmp_path: Path) -> None:
    src = sparse_file(tmp_path / "a", MIB, {5: b"x"})
    ino = os.stat(src).st_ino
    assert move_file(src, tmp_path / "b") == "rename"
    assert os.stat(tmp_path / "b").st_ino == ino and not src.exists()


def test_merge_sparse_writes_only_the_diffs_pages(tmp_path: Path) -> None:
    target = sparse_file(tmp_path / "base", 4 * MIB, {0: b"B" * 4096, 8192: b"K" * 4096})
    diff = sparse_file(tmp_path / "diff", 4 * MIB, {8192: b"D" * 4096, 3 * MIB: b"E" * 4096})
    assert merge_sparse(diff, target) >= 8192
    data = target.read_bytes()
    assert data[:4096] == b"B" * 4096  # untouched parent page
    assert data[8192:12288] == b"D" * 4096  # overwritten by the diff
    assert data[3 * MIB : 3 * MIB + 4096] == b"E" * 4096  # new page
    assert len(data) == 4 * MIB
