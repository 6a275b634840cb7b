from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import blake3
import pytest

from forkd_client import verified as verified_mod
from forkd_client.verified import VerifiedRecord
from manifest.errors import InvalidDigest

from .snapshots import age, scribble


@pytest.fixture
def record(tmp_path: Path):
    with VerifiedRecord(tmp_path / "verified.db") as r:
        yield r


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "memory.bin"
    path.write_bytes(os.urandom(200_000))
    age(path)
    return path


def no_hashing(*args, **kwargs):
    raise AssertionError("the file was hashed again")


def test_digests_match_the_real_hashes(record: VerifiedRecord, old_file: Path) -> None:
    data = old_file.read_bytes()
    got = record.digests(old_file, ("blake3", "sha256"))
    assert got == {
        "blake3": "blake3:" + blake3.blake3(data).hexdigest(),
        "sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
    }


def test_unchanged_file_is_never_hashed_again(record: VerifiedRecord, old_file: Path, monkeypatch) -> None:
    first = record.digests(old_file, ("blake3", "sha256"))
    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)
    assert record.digests(old_file, ("sha256",)) == {"sha256": first["sha256"]}
    assert record.digests(old_file) == {"blake3": first["blake3"]}
    # a second connection to the same database trusts the record too
    with VerifiedRecord(record.db_path) as other:
        assert other.digests(old_file, ("blake3", "sha256")) == first


def test_only_missing_algorithms_are_hashed(record: VerifiedRecord, old_file: Path, monkeypatch) -> None:
    record.digests(old_file, ("blake3",))
    asked: list[tuple[str, ...]] = []
    real = verified_mod.digest_file

    def spy(path, algorithms):
        asked.append(tuple(algorithms))
        return real(path, algorithms)

    monkeypatch.setattr(verified_mod, "digest_file", spy)
    got = record.digests(old_file, ("blake3", "sha256"))
    assert asked == [("sha256",)]
    assert set(got) == {"blake3", "sha256"}


def test_changed_content_invalidates_the_row(record: VerifiedRecord, old_file: Path) -> None:
    before = record.digests(old_file, ("sha256",))
    scribble(old_file)  # same size, new mtime
    after = record.digests(old_file, ("sha256",))
    assert after != before
    assert after["sha256"] == "sha256:" + hashlib.sha256(old_file.read_bytes()).hexdigest()


def test_replaced_file_with_same_size_and_mtime_is_rehashed(record: VerifiedRecord, old_file: Path, tmp_path) -> None:
    record.digests(old_file, ("sha256",))
    st = os.stat(old_file)
    other = tmp_path / "other"
    other.write_bytes(os.urandom(st.st_size))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, old_file)  # new inode, same size and mtime
    assert (
        record.digests(old_file, ("sha256",))["sha256"] == "sha256:" + hashlib.sha256(old_file.read_bytes()).hexdigest()
    )


def test_racy_record_is_verified_again(record: VerifiedRecord, tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "fresh"
    path.write_bytes(b"x" * 5000)
    future = time.time_ns() + 3_600 * 1_000_000_000  # an mtime the record cannot be "long after"
    os.utime(path, ns=(future, future))
    record.digests(path, ("blake3",))
    assert record.cached(path) == {}  # racy rows are not trusted
    calls = []
    real = verified_mod.digest_file
    monkeypatch.setattr(verified_mod, "digest_file", lambda p, a: calls.append(a) or real(p, a))
    record.digests(path, ("blake3",))
    assert calls == [("blake3",)]


def test_file_changing_while_hashed_is_not_recorded(record: VerifiedRecord, old_file: Path, monkeypatch) -> None:
    real = verified_mod.digest_file

    def hash_then_modify(path, algorithms):
        result = real(path, algorithms)
        scribble(Path(path))
        return result

    monkeypatch.setattr(verified_mod, "digest_file", hash_then_modify)
    record.digests(old_file, ("sha256",))
    assert record.cached(old_file) == {}


def test_record_learned_digests(record: VerifiedRecord, old_file: Path, monkeypatch) -> None:
    sha = "sha256:" + hashlib.sha256(old_file.read_bytes()).hexdigest()
    record.record(old_file, {"sha256": sha})
    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)
    assert record.digests(old_file, ("sha256",)) == {"sha256": sha}
    assert record.cached(old_file) == {"sha256": sha}


def test_record_rejects_bad_digests(record: VerifiedRecord, old_file: Path) -> None:
    with pytest.raises(InvalidDigest):
        record.record(old_file, {"sha256": "blake3:" + "0" * 64})
    with pytest.raises(InvalidDigest):
        record.record(old_file, {"sha256": "sha256:XYZ"})
    with pytest.raises(InvalidDigest):
        record.digests(old_file, ("md5",))


def test_forget_and_rename_cover_whole_directories(record: VerifiedRecord, tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "snap"
    d.mkdir()
    f = d / "memory.bin"
    f.write_bytes(b"abc" * 1000)
    age(f)
    sibling = tmp_path / "snap0"  # shares the prefix "snap" but is not under snap/
    sibling.write_bytes(b"zzz")
    age(sibling)
    want = record.digests(f)
    record.digests(sibling)
    moved = tmp_path / "moved"
    os.rename(d, moved)
    record.rename(d, moved)
    assert record.cached(moved / "memory.bin") == want
    assert record.cached(sibling) != {}
    record.forget(moved)
    assert record.cached(moved / "memory.bin") == {}
    assert record.cached(sibling) != {}


def test_missing_file_raises_oserror(record: VerifiedRecord, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        record.digests(tmp_path / "nope")
    assert record.cached(tmp_path / "nope") == {}


def test_chunk_tree_is_read_once_then_trusted_with_the_other_digests(
    record: VerifiedRecord, old_file: Path, monkeypatch
) -> None:
    from manifest.chunktree import file_chunk_tree

    expected = file_chunk_tree(old_file, 65536)
    digests = record.digests(old_file, ("blake3", "sha256"))
    assert record.chunk_tree(old_file, 65536) == expected
    monkeypatch.setattr(verified_mod, "file_chunk_tree", no_hashing)
    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)
    assert record.chunk_tree(old_file, 65536) == expected
    assert record.digests(old_file, ("blake3", "sha256")) == digests  # kept beside the tree
    assert record.cached(old_file) == digests  # the tree is not an algorithm: cached() never lists it
    with VerifiedRecord(record.db_path) as other:
        assert other.chunk_tree(old_file, 65536) == expected


def test_chunk_tree_of_another_chunk_size_or_a_changed_file_is_read_again(
    record: VerifiedRecord, old_file: Path, monkeypatch
) -> None:
    from manifest.chunktree import file_chunk_tree

    first = record.chunk_tree(old_file, 65536)
    assert record.chunk_tree(old_file, 4096) == file_chunk_tree(old_file, 4096) != first
    scribble(old_file)
    age(old_file)
    assert record.chunk_tree(old_file, 65536) == file_chunk_tree(old_file, 65536) != first


def test_a_record_from_before_chunk_trees_gains_the_column(tmp_path: Path, old_file: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE verified (path TEXT PRIMARY KEY, dev INTEGER NOT NULL, ino INTEGER NOT NULL, "
            "size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, "
            "recorded_ns INTEGER NOT NULL, blake3 TEXT, sha256 TEXT)"
        )
    with VerifiedRecord(db) as old:
        digests = old.digests(old_file, ("blake3",))
        assert old.chunk_tree(old_file, 65536).startswith("blake3:")
        assert old.digests(old_file, ("blake3",)) == digests


def test_a_recorded_chunk_tree_is_trusted_until_the_file_changes(
    record: VerifiedRecord, old_file: Path, monkeypatch
) -> None:
    """What a pull records (the tree it proved by construction) is served without reading the
    file, kept beside other digests, and dropped once the file changes."""
    from manifest.chunktree import file_chunk_tree

    tree = file_chunk_tree(old_file, 65536)
    assert record.cached_tree(old_file) is None
    record.record_chunk_tree(old_file, 65536, tree)
    record.record(old_file, {"sha256": "sha256:" + hashlib.sha256(old_file.read_bytes()).hexdigest()})
    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)
    assert record.cached_tree(old_file) == (65536, tree)
    assert record.chunk_tree(old_file, 65536, no_hashing) == tree
    assert "sha256" in record.cached(old_file)
    with pytest.raises(InvalidDigest):
        record.record_chunk_tree(old_file, 65536, "sha256:" + "00" * 32)
    scribble(old_file)
    assert record.cached_tree(old_file) is None
