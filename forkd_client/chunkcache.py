"""A local content-addressed cache of chunk zstd frames.

Push and pull move chunks as zstd frames (one frame per chunk, see
docs/manifest-format.md). Frames fetched once are kept here so a second pull of a
chain that shares chunks fetches nothing again. Layout::

    <root>/
      blake3/
        <first 2 hex>/
          <64 hex>.zst         one chunk's zstd frame, named by the chunk's blake3 digest
          .<hex>.<rand>.partial  a frame being written (renamed into place when complete)

Frames are verified (decompressed and hashed) before they are stored and written
atomically (temp file + rename). They are not fsynced: this is a cache, and every reader
verifies a frame again when it decompresses it (``manifest.assemble`` does), so a frame
torn by a crash is detected, reported, and can be :meth:`ChunkCache.remove`-d.

Errors: ``manifest.errors.InvalidDigest`` (not a ``blake3:`` digest),
``manifest.errors.DigestMismatch`` / ``AssemblyError`` (a frame that is not the chunk it
claims to be), OSError from the filesystem.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from manifest.assemble import decompress_chunk
from manifest.digest import parse_digest
from manifest.errors import InvalidDigest


class ChunkCache:
    """Chunk frames on disk, keyed by the blake3 digest of the uncompressed chunk."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path_for(self, digest: str) -> Path:
        """Where the frame of chunk ``digest`` lives. Raises InvalidDigest."""
        parsed = parse_digest(digest)
        if parsed.algorithm != "blake3":
            raise InvalidDigest(f"chunk cache holds blake3 chunks only, got {digest!r}")
        return self.root / "blake3" / parsed.hex[:2] / f"{parsed.hex}.zst"

    def has(self, digest: str) -> bool:
        return self.path_for(digest).is_file()

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and self.has(digest)

    def get_frame(self, digest: str) -> bytes | None:
        """The stored frame of chunk ``digest``, or None. Callers verify it when they decompress it."""
        try:
            return self.path_for(digest).read_bytes()
        except FileNotFoundError:
            return None

    def put_frame(self, digest: str, frame: bytes, length: int) -> bool:
        """Verify that ``frame`` decompresses to ``length`` bytes hashing to ``digest``, then store it.

        Returns True when the frame was stored, False when the chunk was already cached.
        Raises InvalidDigest, DigestMismatch or AssemblyError (bad frame), OSError.
        """
        path = self.path_for(digest)
        if path.is_file():
            return False
        decompress_chunk(frame, length, digest, f"chunk {digest}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.partial")
        try:
            with open(tmp, "wb") as f:
                f.write(frame)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return True

    def remove(self, digest: str) -> bool:
        """Delete the frame of ``digest``; True if there was one."""
        try:
            self.path_for(digest).unlink()
        except FileNotFoundError:
            return False
        return True

    def digests(self) -> Iterator[str]:
        """Every cached chunk digest (in no particular order)."""
        for entry in self._entries():
            yield "blake3:" + entry.name[: -len(".zst")]

    def __len__(self) -> int:
        return sum(1 for _ in self._entries())

    def size_bytes(self) -> int:
        """Total bytes of stored frames (their compressed size)."""
        total = 0
        for entry in self._entries():
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # removed while we counted
                pass
        return total

    def _entries(self) -> Iterator[os.DirEntry[str]]:
        base = self.root / "blake3"
        if not base.is_dir():
            return
        for sub in os.scandir(base):
            if sub.is_dir():
                for entry in os.scandir(sub.path):
                    if entry.name.endswith(".zst") and not entry.name.startswith("."):
                        yield entry
