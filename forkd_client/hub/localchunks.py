"""Where chunks already sit in installed snapshots, so a pull reads them locally.

``<store root>/chunk-index.db`` (SQLite) maps a chunk digest to ``(file path, offset,
length)`` inside installed snapshot files, recorded when a pulled link is installed. A
location is used only while the verified-content record still trusts that file (same
inode, size, mtime), and the chunk's bytes are re-hashed on read (64 KiB: microseconds), so a
stale or tampered row can cost a download, never correctness. Rows of files that are gone
are dropped when found.

A pull also records in memory (:meth:`~LocalChunkIndex.stage`) the chunks each link it fetched wrote into
its staged files (each verified on arrival), so a later link of the same pull reads a chunk it shares
with an earlier one locally instead of fetching it again, before the earlier link is installed (and
indexed). What one pull moves is then each missing chunk once: the number placement predicts
(docs/placement.md).
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
        self._staged: dict[str, tuple[Path, int, int]] = {}

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

    def stage(self, path: Path, chunks: Iterable[tuple[str, int, int]]) -> None:
        """Chunks ``(digest, offset, length)`` this process wrote into the staged file ``path``: read from
        there (re-hashed) while it is there; kept in memory only (the module docstring)."""
        for digest, offset, length in chunks:
            self._staged.setdefault(digest, (Path(path), offset, length))

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
        found = {d for d in wanted if d in self._staged}
        wanted = [d for d in wanted if d not in found]
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
        """The chunk's bytes from a staged or trusted local file, verified, or None."""
        staged = self._staged.get(digest)
        if staged is not None:
            path, offset, length = staged
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read(length)
            except OSError:
                data = b""
            if len(data) == length and "blake3:" + blake3.blake3(data).hexdigest() == digest:
                return data
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
