"""The verified-content record: hash a file once, trust a stat fingerprint after.

forkd re-hashes every parent's memory.bin (SHA-256, ~460 ms per 512 MiB link) on every
spawn. We hash once and remember the result in a small SQLite database keyed by the
file's absolute path, together with its stat fingerprint ``(dev, ino, size, mtime_ns,
ctime_ns)``. While the fingerprint is unchanged the recorded digests are returned without
reading the file; any change to it invalidates every digest of that row.

Racy records (as in git's "racy index"): a file modified within the same timestamp tick
as its last recorded modification keeps its mtime. So a row written less than one tick
window after the file's last modification is *racy*: it is not trusted, and the next
lookup hashes the file again and re-records it (trusted from then on, once the window has
passed). Windows: 2 s when the file's mtime has whole-second resolution (coarse
filesystems), else 50 ms (covers a jiffy of the kernel's coarse clock). Files the store
writes itself never hit this: it moves their mtime into the past before recording them.

Digests are ``algorithm:hex`` strings (``blake3:…``, ``sha256:…``), see :mod:`manifest.digest`.
A row also keeps the file's chunk-tree digest (format v2, :mod:`manifest.chunktree`) for one
chunk size, so a push does not read an unchanged parent or base again (:meth:`chunk_tree`).

Errors: OSError when a file cannot be read or stat'ed; ``manifest.errors.InvalidDigest``
for an unknown algorithm or a malformed digest given to :meth:`VerifiedRecord.record`;
``sqlite3.Error`` if the database itself is unusable. A full disk is not an error here: the record is then read
only and what it would have recorded is hashed again next time (:mod:`forkd_client.localdb`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from manifest.chunktree import file_chunk_tree
from manifest.digest import ALGORITHMS, digest_file, parse_digest
from manifest.errors import InvalidDigest

from .localdb import open_store_database

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verified (
    path        TEXT PRIMARY KEY,
    dev         INTEGER NOT NULL,
    ino         INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    ctime_ns    INTEGER NOT NULL,
    recorded_ns INTEGER NOT NULL,
    blake3      TEXT,
    sha256      TEXT,
    chunk_tree  TEXT
)
"""
_TREE = "chunktree"
"""Key of the chunk-tree digest in a row's digests: stored as ``"<chunk size> blake3:<hex>"``."""
_FINE_WINDOW_NS = 50_000_000
_COARSE_WINDOW_NS = 2_000_000_000

Fingerprint = tuple[int, int, int, int, int]


def _fingerprint(st: os.stat_result) -> Fingerprint:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _is_racy(mtime_ns: int, recorded_ns: int) -> bool:
    window = _COARSE_WINDOW_NS if mtime_ns % 1_000_000_000 == 0 else _FINE_WINDOW_NS
    return recorded_ns - mtime_ns < window


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(path)


def _check_algorithms(algorithms: Iterable[str]) -> tuple[str, ...]:
    algorithms = tuple(dict.fromkeys(algorithms))
    for a in algorithms:
        if a not in ALGORITHMS:
            raise InvalidDigest(f"unsupported digest algorithm {a!r} (supported: {', '.join(ALGORITHMS)})")
    return algorithms


class VerifiedRecord:
    """Digests of files verified earlier, trusted while their stat fingerprint holds.

    One instance holds one SQLite connection (WAL mode, so several processes may share the
    database). Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        # on a full disk: a read-only view, and writes skipped (forkd_client.localdb)
        self._db = open_store_database(self.db_path, _SCHEMA, synchronous_normal=True)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(verified)")}
        if "chunk_tree" not in columns:  # a record written before chunk trees were kept
            with contextlib.suppress(sqlite3.OperationalError):  # another process may add it first
                self._db.execute("ALTER TABLE verified ADD COLUMN chunk_tree TEXT")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> VerifiedRecord:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cached(self, path: str | os.PathLike[str]) -> dict[str, str]:
        """Digests recorded for ``path`` that are still trusted, without reading the file.

        Returns ``{}`` when the file is gone, changed, unrecorded or racy. Raises nothing
        but ``sqlite3.Error``.
        """
        key = _key(path)
        try:
            st = os.stat(key)
        except OSError:
            return {}
        row = self._row(key)
        if row is None or row[0] != _fingerprint(st) or _is_racy(st.st_mtime_ns, row[1]):
            return {}
        return {a: v for a, v in row[2].items() if a != _TREE}

    def chunk_tree(
        self,
        path: str | os.PathLike[str],
        chunk_size: int,
        compute: Callable[[str | os.PathLike[str], int], str] = file_chunk_tree,
    ) -> str:
        """The chunk-tree digest (``blake3:…``) of ``path`` cut in ``chunk_size`` chunks, reading the
        file (with ``compute``) only when no trusted row holds it for that chunk size; what is read
        is recorded.

        Raises OSError (file missing or unreadable), InvalidChunkSize.
        """
        key = _key(path)
        before = os.stat(key)
        fp = _fingerprint(before)
        row = self._row(key)
        trusted = row is not None and row[0] == fp and not _is_racy(before.st_mtime_ns, row[1])
        known = dict(row[2]) if trusted and row is not None else {}
        size, _, recorded = known.get(_TREE, "").partition(" ")
        if recorded and size == str(chunk_size):
            return recorded
        tree = compute(path, chunk_size)
        if _fingerprint(os.stat(key)) == fp:
            known[_TREE] = f"{chunk_size} {tree}"
            self._store(key, fp, known)
        return tree

    def cached_tree(self, path: str | os.PathLike[str]) -> tuple[int, str] | None:
        """The chunk-tree digest recorded for ``path`` as ``(chunk size, "blake3:…")``, while the row is
        trusted, without reading the file; None when the file is gone, changed, racy or has no tree.
        Raises nothing but ``sqlite3.Error``."""
        key = _key(path)
        try:
            st = os.stat(key)
        except OSError:
            return None
        row = self._row(key)
        if row is None or row[0] != _fingerprint(st) or _is_racy(st.st_mtime_ns, row[1]) or _TREE not in row[2]:
            return None
        size, _, tree = row[2][_TREE].partition(" ")
        return int(size), tree

    def record_chunk_tree(self, path: str | os.PathLike[str], chunk_size: int, tree: str) -> None:
        """Record the chunk-tree digest of ``path`` learned elsewhere (a pull derives it from the
        parent's chunk list and the layer's chunk map, every new chunk verified on arrival).

        The caller vouches for it, as for :meth:`record`; digests already recorded under the same
        (non-racy) fingerprint are kept. Raises OSError (file missing), InvalidDigest (not blake3).
        """
        if parse_digest(tree).algorithm != "blake3":
            raise InvalidDigest(f"chunk-tree digest {tree!r} is not a blake3 digest")
        self._merge(path, {_TREE: f"{chunk_size} {tree}"})

    def digests(self, path: str | os.PathLike[str], algorithms: Iterable[str] = ("blake3",)) -> dict[str, str]:
        """``{algorithm: "algorithm:hex"}`` for ``path``, hashing only what is not already trusted.

        When the recorded fingerprint matches (and the row is not racy) and every requested
        algorithm is recorded, the file is not read at all. Otherwise only the missing
        algorithms are computed, in one read pass (all of them when the row was stale), and
        recorded. Nothing is recorded if the file changed while it was being hashed.

        Raises OSError (file missing or unreadable), InvalidDigest (unknown algorithm).
        """
        algorithms = _check_algorithms(algorithms)
        key = _key(path)
        before = os.stat(key)
        fp = _fingerprint(before)
        row = self._row(key)
        known: dict[str, str] = {}
        if row is not None and row[0] == fp and not _is_racy(before.st_mtime_ns, row[1]):
            known = dict(row[2])
        elif row is not None and row[0] == fp:
            # racy: re-verify everything the row claims, so no stale digest survives
            algorithms = tuple(dict.fromkeys((*algorithms, *(a for a in row[2] if a != _TREE))))
        missing = tuple(a for a in algorithms if a not in known)
        if missing:
            fresh = {a: str(d) for a, d in digest_file(key, missing).items()}
            if _fingerprint(os.stat(key)) == fp:
                known.update(fresh)
                self._store(key, fp, known)
            else:
                known.update(fresh)  # the caller gets what it read; we keep nothing about a moving file
                self._delete(key)
        return {a: known[a] for a in algorithms if a in known}

    def record(self, path: str | os.PathLike[str], digests: Mapping[str, str]) -> None:
        """Record digests of ``path`` learned elsewhere (e.g. verified while streaming it in).

        The caller vouches that the file's current content has these digests. Digests
        already recorded under the same (non-racy) fingerprint are kept; otherwise the row
        is replaced. ``digests`` maps algorithm to ``algorithm:hex``. Like any record, it is
        trusted only once the file's mtime is older than the racy window (the store moves
        the mtimes of files it installs into the past for exactly this reason).

        Raises OSError (file missing), InvalidDigest (malformed, or key ≠ its algorithm).
        """
        for algorithm, value in digests.items():
            parsed = parse_digest(value)
            if parsed.algorithm != algorithm:
                raise InvalidDigest(f"digest {value!r} recorded under algorithm {algorithm!r}")
        self._merge(path, digests)

    def _merge(self, path: str | os.PathLike[str], entries: Mapping[str, str]) -> None:
        """Record ``entries`` for ``path``'s current content, keeping what is recorded under the
        same (non-racy) fingerprint and replacing a stale row. Raises OSError (file missing)."""
        key = _key(path)
        st = os.stat(key)
        fp = _fingerprint(st)
        row = self._row(key)
        keep = row is not None and row[0] == fp and not _is_racy(st.st_mtime_ns, row[1])
        merged = dict(row[2]) if keep and row is not None else {}
        merged.update(entries)
        self._store(key, fp, merged)

    def forget(self, path: str | os.PathLike[str]) -> None:
        """Drop the record of ``path`` and of every file under it (when it is a directory)."""
        key = _key(path)
        self._db.execute("DELETE FROM verified WHERE path = ? OR (path >= ? AND path < ?)", (key, key + "/", key + "0"))

    def rename(self, old: str | os.PathLike[str], new: str | os.PathLike[str]) -> None:
        """Move records from ``old`` to ``new`` after the file or directory was renamed.

        A rename keeps inode and timestamps, so the fingerprints stay valid.
        """
        old_key, new_key = _key(old), _key(new)
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "DELETE FROM verified WHERE path = ? OR (path >= ? AND path < ?)",
                (new_key, new_key + "/", new_key + "0"),
            )
            self._db.execute(
                "UPDATE verified SET path = ? || substr(path, ?) WHERE path = ? OR (path >= ? AND path < ?)",
                (new_key, len(old_key) + 1, old_key, old_key + "/", old_key + "0"),
            )

    def forget_missing(self, *, dry_run: bool = False) -> int:
        """Drop (or with ``dry_run`` only count) the records of files that no longer exist; return how many."""
        gone = [p for (p,) in self._db.execute("SELECT path FROM verified") if not os.path.lexists(p)]
        if not dry_run:
            for key in gone:
                self._delete(key)
        return len(gone)

    def _row(self, key: str) -> tuple[Fingerprint, int, dict[str, str]] | None:
        row = self._db.execute(
            "SELECT dev, ino, size, mtime_ns, ctime_ns, recorded_ns, blake3, sha256, chunk_tree FROM verified"
            " WHERE path = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        digests = {a: v for a, v in (("blake3", row[6]), ("sha256", row[7]), (_TREE, row[8])) if v}
        return tuple(row[:5]), row[5], digests

    def _store(self, key: str, fp: Fingerprint, digests: Mapping[str, str]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO verified (path, dev, ino, size, mtime_ns, ctime_ns, recorded_ns, blake3, sha256,"
            " chunk_tree) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, *fp, time.time_ns(), digests.get("blake3"), digests.get("sha256"), digests.get(_TREE)),
        )

    def _delete(self, key: str) -> None:
        self._db.execute("DELETE FROM verified WHERE path = ?", (key,))
