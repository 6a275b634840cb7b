"""forkd_client.localdb: the store's caches give way on a full disk (read-only view, writes skipped)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from forkd_client import localdb
from forkd_client.localdb import open_store_database, skipped_writes

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT);"


def test_a_writable_database_writes(tmp_path: Path) -> None:
    db = open_store_database(tmp_path / "a.db", SCHEMA)
    db.execute("INSERT INTO t VALUES ('a', '1')")
    assert db.execute("SELECT v FROM t").fetchall() == [("1",)] and not db.read_only
    assert skipped_writes() == {}
    db.close()


def test_on_a_full_disk_the_file_is_read_only_and_writes_are_skipped(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "a.db"
    db = open_store_database(path, SCHEMA)
    db.execute("INSERT INTO t VALUES ('a', '1')")
    db.close()

    real_connect = sqlite3.connect

    def full(target, *args, **kwargs):  # what SQLite says when it cannot grow the WAL index of a full disk
        if str(target).startswith(str(tmp_path)):  # the files; not the read-only "file:" view or ":memory:"
            raise sqlite3.OperationalError("disk I/O error")
        return real_connect(target, *args, **kwargs)

    monkeypatch.setattr(localdb.sqlite3, "connect", full)
    monkeypatch.setattr(localdb, "is_no_space", lambda error, where=None: True)
    view = open_store_database(path, SCHEMA)
    assert view.read_only and view.execute("SELECT v FROM t").fetchall() == [("1",)]
    view.execute("INSERT INTO t VALUES ('b', '2')")  # skipped, not raised
    with view:
        view.execute("DELETE FROM t")
    assert view.execute("SELECT count(*) FROM t").fetchone() == (1,)
    assert skipped_writes() == {str(path): 2} and skipped_writes() == {}
    view.close()
    empty = open_store_database(tmp_path / "new.db", SCHEMA)  # no file yet: an empty in-memory database
    assert empty.read_only and empty.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_other_errors_still_raise(tmp_path: Path) -> None:
    db = open_store_database(tmp_path / "a.db", SCHEMA)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        db.execute("INSERT INTO nope VALUES (1)")
