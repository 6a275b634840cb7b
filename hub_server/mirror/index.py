"""The mirror's index: what its store holds and what the upstream said, in one SQLite file (``DIR/mirror.db``).

Tables (all survive a restart, which is how a restarted mirror keeps its cache):

    objects(digest, size, media_type, last_used)   verified bytes in the store, by digest (LRU order)
    links(repository, digest)                      the upstream confirmed ``digest`` in ``repository``
    tags(repository, tag, digest, fetched)         a tag's digest as the upstream resolved it at ``fetched``
    docs(path, body, headers, fetched)             a JSON answer (chain, tags list, referrers, registry.json)
    auth(fingerprint, repository, status, body, headers, checked)   the upstream's answer to a credential

Times are ``time.time()`` seconds. An object row is written only after its bytes are verified and committed
in the store (``cache.py``), and removed before they are deleted, so the index never names bytes that are
not there; bytes without a row (a crash in between) are overwritten by the next fetch.

Every method runs its statement in a worker thread (``asyncio.to_thread``), one connection behind a lock.
Errors: ``sqlite3.Error`` subclasses (a broken or unwritable file); ``MirrorIndex.open`` raises
``OSError``/``sqlite3.Error`` when the file cannot be opened.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["CachedDoc", "CachedObject", "MirrorIndex", "StoredAnswer"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (digest TEXT PRIMARY KEY, size INTEGER NOT NULL, media_type TEXT NOT NULL,
    last_used REAL NOT NULL);
CREATE INDEX IF NOT EXISTS objects_lru ON objects (last_used);
CREATE TABLE IF NOT EXISTS links (repository TEXT NOT NULL, digest TEXT NOT NULL, PRIMARY KEY (repository, digest));
CREATE TABLE IF NOT EXISTS tags (repository TEXT NOT NULL, tag TEXT NOT NULL, digest TEXT NOT NULL,
    fetched REAL NOT NULL, PRIMARY KEY (repository, tag));
CREATE TABLE IF NOT EXISTS docs (path TEXT PRIMARY KEY, body BLOB NOT NULL, headers TEXT NOT NULL,
    fetched REAL NOT NULL);
CREATE TABLE IF NOT EXISTS auth (fingerprint TEXT NOT NULL, repository TEXT NOT NULL, status INTEGER NOT NULL,
    body BLOB NOT NULL, headers TEXT NOT NULL, checked REAL NOT NULL, PRIMARY KEY (fingerprint, repository));
"""


@dataclass(frozen=True)
class CachedObject:
    digest: str
    size: int
    media_type: str


@dataclass(frozen=True)
class CachedDoc:
    body: bytes
    headers: dict[str, str]
    fetched: float


@dataclass(frozen=True)
class StoredAnswer:
    """The upstream's answer to one credential for one repository: ``status`` 200 is an allow."""

    status: int
    body: bytes
    headers: dict[str, str]
    checked: float


class MirrorIndex:
    """The index file; see the module docstring."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> MirrorIndex:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        return cls(db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        def locked() -> _T:
            with self._lock:
                return fn(self._db)

        return await asyncio.to_thread(locked)

    async def _execute(self, sql: str, args: tuple[Any, ...]) -> None:
        await self._run(lambda db: db.execute(sql, args))

    async def _one(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return await self._run(lambda db: db.execute(sql, args).fetchone())

    # -- objects -------------------------------------------------------------------------------------

    async def object(self, digest: str) -> CachedObject | None:
        row = await self._one("SELECT size, media_type FROM objects WHERE digest = ?", (digest,))
        return None if row is None else CachedObject(digest, row[0], row[1])

    async def add_object(self, obj: CachedObject, now: float) -> None:
        await self._execute(
            "INSERT OR REPLACE INTO objects (digest, size, media_type, last_used) VALUES (?, ?, ?, ?)",
            (obj.digest, obj.size, obj.media_type, now),
        )

    async def touch(self, digest: str, now: float) -> None:
        await self._execute("UPDATE objects SET last_used = ? WHERE digest = ?", (now, digest))

    async def forget_object(self, digest: str) -> None:
        def forget(db: sqlite3.Connection) -> None:
            db.execute("BEGIN")
            db.execute("DELETE FROM objects WHERE digest = ?", (digest,))
            db.execute("DELETE FROM links WHERE digest = ?", (digest,))
            db.execute("COMMIT")

        await self._run(forget)

    async def total_bytes(self) -> int:
        row = await self._one("SELECT COALESCE(SUM(size), 0) FROM objects", ())
        return int(row[0]) if row else 0

    async def least_recent(self, limit: int) -> list[CachedObject]:
        rows = await self._run(
            lambda db: db.execute(
                "SELECT digest, size, media_type FROM objects ORDER BY last_used LIMIT ?", (limit,)
            ).fetchall()
        )
        return [CachedObject(*row) for row in rows]

    # -- links ---------------------------------------------------------------------------------------

    async def linked(self, repository: str, digest: str) -> bool:
        row = await self._one("SELECT 1 FROM links WHERE repository = ? AND digest = ?", (repository, digest))
        return row is not None

    async def link(self, repository: str, digest: str) -> None:
        await self._execute("INSERT OR IGNORE INTO links (repository, digest) VALUES (?, ?)", (repository, digest))

    # -- tags ----------------------------------------------------------------------------------------

    async def tag(self, repository: str, tag: str) -> tuple[str, float] | None:
        row = await self._one("SELECT digest, fetched FROM tags WHERE repository = ? AND tag = ?", (repository, tag))
        return None if row is None else (row[0], row[1])

    async def set_tag(self, repository: str, tag: str, digest: str, now: float) -> None:
        await self._execute(
            "INSERT OR REPLACE INTO tags (repository, tag, digest, fetched) VALUES (?, ?, ?, ?)",
            (repository, tag, digest, now),
        )

    async def drop_tag(self, repository: str, tag: str) -> None:
        await self._execute("DELETE FROM tags WHERE repository = ? AND tag = ?", (repository, tag))

    # -- documents -----------------------------------------------------------------------------------

    async def doc(self, path: str) -> CachedDoc | None:
        row = await self._one("SELECT body, headers, fetched FROM docs WHERE path = ?", (path,))
        return None if row is None else CachedDoc(bytes(row[0]), json.loads(row[1]), row[2])

    async def set_doc(self, path: str, doc: CachedDoc) -> None:
        await self._execute(
            "INSERT OR REPLACE INTO docs (path, body, headers, fetched) VALUES (?, ?, ?, ?)",
            (path, doc.body, json.dumps(doc.headers), doc.fetched),
        )

    async def drop_doc(self, path: str) -> None:
        await self._execute("DELETE FROM docs WHERE path = ?", (path,))

    # -- access answers ------------------------------------------------------------------------------

    async def answer(self, fingerprint: str, repository: str) -> StoredAnswer | None:
        row = await self._one(
            "SELECT status, body, headers, checked FROM auth WHERE fingerprint = ? AND repository = ?",
            (fingerprint, repository),
        )
        return None if row is None else StoredAnswer(row[0], bytes(row[1]), json.loads(row[2]), row[3])

    async def set_answer(self, fingerprint: str, repository: str, answer: StoredAnswer) -> None:
        await self._execute(
            "INSERT OR REPLACE INTO auth (fingerprint, repository, status, body, headers, checked) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (fingerprint, repository, answer.status, answer.body, json.dumps(answer.headers), answer.checked),
        )

    async def prune_answers(self, older_than: float) -> None:
        await self._execute("DELETE FROM auth WHERE checked < ?", (older_than,))
