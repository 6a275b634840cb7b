"""atomic_write / write_atomically: the one way the project publishes a file all or nothing."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest

from manifest.fileops import _without, atomic_write, can_reflink, copy_data_ranges, copy_ranges_except, write_atomically

MIB = 1 << 20


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_write_replaces_the_whole_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    target.write_bytes(b"old and longer than the new content")
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new"
    write_atomically(target, "text é")
    assert target.read_text(encoding="utf-8") == "text é"
    assert names(tmp_path) == ["doc.json"]


def test_an_error_inside_the_block_keeps_the_old_file_and_removes_the_partial(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_bytes(b"before")

    def interrupted_write() -> None:
        with atomic_write(target) as f:
            f.write(b"half of the new cont")
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        interrupted_write()
    assert target.read_bytes() == b"before"
    assert names(tmp_path) == ["state"]


def test_a_new_file_gets_the_permissions_asked_for(tmp_path: Path) -> None:
    write_atomically(tmp_path / "secret", b"token", perms=0o600)
    assert stat.S_IMODE(os.stat(tmp_path / "secret").st_mode) == 0o600


def test_two_writers_at_once_never_share_a_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    with atomic_write(target) as first, atomic_write(target, sync_dir=True) as second:
        assert first.name != second.name
        first.write(b"first")
        second.write(b"second")
    assert target.read_bytes() == b"first"  # the last rename wins: the outer block closes last
    assert names(tmp_path) == ["f"]


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    (tmp_path / "link").symlink_to(victim)
    write_atomically(tmp_path / "link", b"new")
    assert victim.read_bytes() == b"untouched"
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link").read_bytes() == b"new"


def test_copy_data_ranges_copies_data_at_its_offsets_and_skips_holes(tmp_path: Path) -> None:
    diff, target = tmp_path / "diff", tmp_path / "target"
    with open(diff, "wb") as f:
        f.truncate(4 * MIB)
        f.seek(MIB)
        f.write(b"D" * 4096)
    target.write_bytes(b"B" * (4 * MIB))
    with open(diff, "rb") as fin, open(target, "r+b") as fout:
        copied = copy_data_ranges(fin.fileno(), fout.fileno())
    data = target.read_bytes()
    assert copied >= 4096 and copied < 4 * MIB
    assert data[MIB : MIB + 4096] == b"D" * 4096 and data[:MIB] == b"B" * MIB and data[-MIB:] == b"B" * MIB


def test_ranges_without_kept_ranges_match_a_byte_by_byte_model() -> None:
    rng = random.Random(7)
    for _ in range(300):
        size = 200
        ranges, pos = [], 0
        while pos < size:
            start = pos + rng.randrange(0, 12)
            length = rng.randrange(1, 20)
            if start >= size:
                break
            ranges.append((start, min(length, size - start)))
            pos = start + length
        keep, pos = [], 0
        while pos < size:
            start = pos + rng.randrange(0, 15)
            length = rng.randrange(1, 10)
            keep.append((start, length))
            pos = start + length
        got = list(_without(iter(ranges), keep))
        want = {b for o, n in ranges for b in range(o, o + n)} - {b for o, n in keep for b in range(o, o + n)}
        assert {b for o, n in got for b in range(o, o + n)} == want
        assert all(n > 0 for _, n in got) and got == sorted(got)


def test_copy_ranges_except_never_writes_the_kept_ranges_and_keeps_holes(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    with open(src, "wb") as f:
        f.truncate(8 * MIB)
        f.seek(MIB)
        f.write(os.urandom(3 * MIB))
    keep = [(MIB + 4096, 65536), (2 * MIB, 100), (6 * MIB, 65536)]  # in data, and in a hole
    with open(dst, "wb") as f:
        f.truncate(8 * MIB)
        for offset, length in keep:
            f.seek(offset)
            f.write(b"\xab" * length)
    with open(src, "rb") as fs, open(dst, "r+b") as fd:
        copy_ranges_except(fs.fileno(), fd.fileno(), 8 * MIB, keep)
    want = bytearray(src.read_bytes())
    for offset, length in keep:
        want[offset : offset + length] = b"\xab" * length
    assert dst.read_bytes() == bytes(want)
    assert os.stat(dst).st_blocks * 512 < 4 * MIB  # the source's holes were not written


def test_can_reflink_answers_per_filesystem_and_leaves_nothing_behind(tmp_path: Path) -> None:
    first = can_reflink(tmp_path)
    assert can_reflink(tmp_path) is first
    assert list(tmp_path.iterdir()) == []
