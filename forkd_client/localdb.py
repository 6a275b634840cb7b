"""The store's two SQLite databases (``verified.db``, ``chunk-index.db``), opened so a full disk never breaks a command.

Both are caches: a missing row costs a re-hash or a download, never correctness. So on a full disk
(:func:`forkd_client.diskspace.is_no_space`):

- opening falls back to a read-only view of the file (``immutable``: no WAL index to grow), or to an
  empty in-memory database when there is no file yet, and every command that only reads keeps working;
- a write that fails for lack of space is skipped, and counted per database: the CLI then warns once,
  naming the database and what to free (:func:`skipped_writes`).

Any other SQLite error is raised as ``sqlite3.Error``, as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from .diskspace import is_no_space

__all__ = ["StoreDatabase", "open_store_database", "skipped_writes"]

_SKIPPED: dict[str, int] = {}
_READS = ("SELECT", "PRAGMA TABLE_INFO", "WITH")


def skipped_writes() -> dict[str, int]:
    """Databases (path → count) whose writes were skipped for lack of space since the last call; clears them."""
    skipped = dict(_SKIPPED)
    _SKIPPED.clear()
    return skipped


class StoreDatabase(sqlite3.Connection):
    """A connection whose writes give way on a full disk (see the module docstring)."""

    path: Path
    read_only: bool = False

    def _skippable(self, error: sqlite3.Error, sql: str) -> bool:
        if sql.lstrip().upper().startswith(_READS):
            return False
        return self.read_only or is_no_space(error, self.path)

    def _skip(self) -> sqlite3.Cursor:
        _SKIPPED[str(self.path)] = _SKIPPED.get(str(self.path), 0) + 1
        if self.in_transaction:
            super().execute("ROLLBACK")
        return super().execute("SELECT 0 WHERE 0")  # an empty cursor, as a write returns

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as e:
            if not self._skippable(e, sql):
                raise
            return self._skip()

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        try:
            return super().executemany(sql, parameters)
        except sqlite3.OperationalError as e:
            if not self._skippable(e, sql):
                raise
            return self._skip()

    def commit(self) -> None:
        try:
            super().commit()
        except sqlite3.OperationalError as e:
            if not self._skippable(e, "COMMIT"):
                raise
            self._skip()

    def __exit__(self, kind: object, value: object, traceback: object) -> Literal[False]:
        try:
            super().__exit__(kind, value, traceback)  # type: ignore[arg-type]
            return False
        except sqlite3.OperationalError as e:
            if not self._skippable(e, "COMMIT"):
                raise
            self._skip()
            return False


def open_store_database(path: Path, schema: str, *, synchronous_normal: bool = False) -> StoreDatabase:
    """``path`` in WAL mode with ``schema`` applied (a script of ``CREATE … IF NOT EXISTS``).

    On a full disk: a read-only view of an existing file, else an empty in-memory database with the
    schema. Raises sqlite3.Error for anything else (a corrupt file, a permission)."""
    try:
        db = sqlite3.connect(path, timeout=30.0, isolation_level=None, factory=StoreDatabase)
    except sqlite3.OperationalError as e:
        if not is_no_space(e, path):
            raise
        return _fallback(path, schema)
    db.path = Path(path)
    try:
        sqlite3.Connection.execute(db, "PRAGMA journal_mode=WAL")
        if synchronous_normal:
            sqlite3.Connection.execute(db, "PRAGMA synchronous=NORMAL")
        sqlite3.Connection.executescript(db, schema)
    except sqlite3.OperationalError as e:
        db.close()
        if not is_no_space(e, path):
            raise
        return _fallback(path, schema)
    return db


def _fallback(path: Path, schema: str) -> StoreDatabase:
    if path.is_file() and path.stat().st_size > 0:
        db = sqlite3.connect(f"file:{path}?immutable=1", uri=True, isolation_level=None, factory=StoreDatabase)
    else:
        db = sqlite3.connect(":memory:", isolation_level=None, factory=StoreDatabase)
        sqlite3.Connection.executescript(db, schema)
    db.path, db.read_only = Path(path), True
    return db
