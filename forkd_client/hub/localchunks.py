"""Where chunks already sit in installed snapshots, so a pull reads them locally.

``<store root>/chunk-index.db`` (SQLite) maps a chunk digest to ``(file path, offset,
length)`` inside installed snapshot files, recorded when a pulled link is installed. A
location is used only while the verified-content record still trusts that file (same
inode, size, mtime), and the chunk's bytes are re-hashed on read (64 KiB: microseconds), so a
stale or tampered row can cost a download, never correctness. Rows of files that are gone
are dropped when found.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import blake3

from ..localdb import open_store_database
from ..verified import VerifiedRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    digest TEXT NOT NULL, path TEXT NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    PRIMARY KEY (digest, path, offset)
);
"""


class LocalChunkIndex:
    def __init__(self, db_path: Path, verified: VerifiedRecord) -> None:
        self._db = open_store_database(db_path, _SCHEMA)  # a full disk: read only (forkd_client.localdb)
        self._verified = verified

    def close(self) -> None:
        self._db.close()

    def add(self, path: Path, chunks: Iterable[tuple[str, int, int]]) -> None:
        """Record ``(digest, offset, length)`` chunks found in the file at ``path``."""
        key = str(Path(path).resolve())
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR IGNORE INTO chunks VALUES (?, ?, ?, ?)", ((d, key, o, n) for d, o, n in chunks)
            )

    def forget_missing(self, *, dry_run: bool = False) -> int:
        """Drop (or with ``dry_run`` only count) the rows of files that no longer exist; return how many."""
        paths = [p for (p,) in self._db.execute("SELECT DISTINCT path FROM chunks") if not Path(p).is_file()]
        count = 0
        for path in paths:
            count += self._db.execute("SELECT count(*) FROM chunks WHERE path = ?", (path,)).fetchone()[0]
            if not dry_run:
                self._db.execute("DELETE FROM chunks WHERE path = ?", (path,))
        return count

    def known(self, digests: Iterable[str]) -> set[str]:
        """Which of ``digests`` have a recorded location (one query per 500; nothing is read)."""
        wanted = list(dict.fromkeys(digests))
        found: set[str] = set()
        for i in range(0, len(wanted), 500):
            batch = wanted[i : i + 500]
            found.update(
                row[0]
                for row in self._db.execute(
                    f"SELECT DISTINCT digest FROM chunks WHERE digest IN ({','.join('?' * len(batch))})", batch
                )
            )
        return found

    def read(self, digest: str) -> bytes | None:
        """The chunk's bytes from a trusted local file, verified, or None."""
        rows = self._db.execute(
            "SELECT path, offset, length FROM chunks WHERE digest = ? LIMIT 8", (digest,)
        ).fetchall()
        for path, offset, length in rows:
            if not self._verified.cached(path) and self._verified.cached_tree(path) is None:
                self._db.execute("DELETE FROM chunks WHERE path = ?", (path,))
                continue
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read(length)
            except OSError:
                continue
            if len(data) == length and "blake3:" + blake3.blake3(data).hexdigest() == digest:
                return data
        return None
