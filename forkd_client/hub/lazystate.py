"""What a lazy session leaves on disk, and how a later pull reads it (resume).

Here, below both, because ``forkd pull`` reads it and ``fork --lazy`` (:mod:`forkd_client.lazy`,
which builds on the pull) writes it: the client's hub code never imports the lazy package.

A lazy session of head layer ``H`` stages under ``<store>/.staging/resume-lazy-<hex of H>/``, for
each file it serves (``memory.bin``, and ``rootfs.ext4`` when the head has one), e.g. for
``memory.bin``: ``memory.bin`` (the head's image, sparse where nothing was fetched),
``memory.bin.present`` (one byte per chunk, written after the chunk's verified bytes) and
``memory.bin.chunks`` (the chunk size on the first line, then the digest of every chunk, one line
each, empty for a zero chunk; written when the session starts). :func:`open_index` gives ``forkd
pull`` of the same head (and a lazy session's own install) a local chunk index that also reads the
chunks present there, each re-hashed when read: a killed lazy session costs the next pull nothing
it had already verified, and a stale or tampered file can cost a download, never correctness.

Errors: OSError.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import blake3

from manifest import mediatypes as mt

from ..install import RESUME_PREFIX
from ..store import SnapshotStore
from .localchunks import LocalChunkIndex

STATE_PREFIX = "lazy-"
PRESENT_SUFFIX = ".present"
CHUNKS_SUFFIX = ".chunks"


def state_key(head_digest: str) -> str:
    """The resumable-staging key of a lazy session of ``head_digest``."""
    return STATE_PREFIX + head_digest.split(":")[-1][:32]


def state_dir(store: SnapshotStore, head_digest: str) -> Path:
    return store.staging_root / f"{RESUME_PREFIX}{state_key(head_digest)}"


def write_chunk_list(image: Path, chunk_size: int, digests: Sequence[str | None]) -> None:
    """Record the chunk size and chunk digests of the image at ``image`` (``None``: a zero chunk)."""
    lines = [str(chunk_size), *(d or "" for d in digests)]
    image.with_name(image.name + CHUNKS_SUFFIX).write_text("".join(line + "\n" for line in lines))


def present_chunks(image: Path) -> dict[str, tuple[int, int]]:
    """``digest -> (offset, length)`` of the chunks the staged ``image`` marks present (unchecked)."""
    try:
        first, *digests = image.with_name(image.name + CHUNKS_SUFFIX).read_text().split("\n")[:-1]
        present = image.with_name(image.name + PRESENT_SUFFIX).read_bytes()
        size = image.stat().st_size
        chunk = int(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if chunk <= 0 or len(present) != len(digests) or len(digests) != -(-size // chunk):
        return {}
    return {
        d: (i * chunk, min(chunk, size - i * chunk))
        for i, d in enumerate(digests)
        if d and present[i] and i * chunk < size
    }


class StagedImageIndex(LocalChunkIndex):
    """The local chunk index, plus the chunks present in a lazy session's staged files (each
    re-hashed when read, like every local chunk); ``where``: digest -> (file, offset, length)."""

    def __init__(self, db_path: Path, store: SnapshotStore, where: dict[str, tuple[Path, int, int]]) -> None:
        super().__init__(db_path, store.verified)
        self._where = where

    def known(self, digests: Iterable[str]) -> set[str]:
        wanted = list(digests)
        return {d for d in wanted if d in self._where} | super().known(d for d in wanted if d not in self._where)

    def read(self, digest: str) -> bytes | None:
        where = self._where.get(digest)
        if where is not None:
            try:
                with open(where[0], "rb") as f:
                    f.seek(where[1])
                    data = f.read(where[2])
            except OSError:
                data = b""
            if "blake3:" + blake3.blake3(data).hexdigest() == digest:
                return data
        return super().read(digest)


def open_index(store: SnapshotStore, head_digest: str) -> LocalChunkIndex:
    """The local chunk index for a pull of ``head_digest``: with the chunks a lazy session of the
    same head staged (in any file it served), when there are any."""
    db = store.root / "chunk-index.db"
    where: dict[str, tuple[Path, int, int]] = {}
    for role in mt.CHUNKED_FILES:
        image = state_dir(store, head_digest) / role
        for digest, (offset, length) in present_chunks(image).items():
            where.setdefault(digest, (image, offset, length))
    return StagedImageIndex(db, store, where) if where else LocalChunkIndex(db, store.verified)
