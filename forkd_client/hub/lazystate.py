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
it had already verified, and a stale or tampered file can cost a download, never correctness. Each
staged directory also holds ``.head.json`` naming the head.

An interrupted ``forkd pull`` of a layer leaves, next to each staged file, ``<file>.entries`` in the same
line format (one digest per chunk index the layer writes, empty elsewhere): with it ``forkd node``
tells the hub which chunks of the layer the host already holds (docs/placement.md).

Errors: OSError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from itertools import repeat
from pathlib import Path

import blake3

from manifest import mediatypes as mt
from manifest.model import ChunkMap

from ..install import RESUME_PREFIX
from ..store import SnapshotStore
from .localchunks import LocalChunkIndex

STATE_PREFIX = "lazy-"
PRESENT_SUFFIX = ".present"
CHUNKS_SUFFIX = ".chunks"
#: an interrupted pull's record of what each staged file should hold (one digest per chunk index)
ENTRIES_SUFFIX = ".entries"
#: a lazy session's record of the head it stages
HEAD_MARKER = ".head.json"


def state_key(head_digest: str) -> str:
    """The resumable-staging key of a lazy session of ``head_digest``."""
    return STATE_PREFIX + head_digest.split(":")[-1][:32]


def state_dir(store: SnapshotStore, head_digest: str) -> Path:
    return store.staging_root / f"{RESUME_PREFIX}{state_key(head_digest)}"


def write_chunk_list(
    image: Path, chunk_size: int, digests: Iterable[str | None], *, suffix: str = CHUNKS_SUFFIX
) -> None:
    """Record the chunk size and chunk digests of the image at ``image`` (``None``: a zero chunk, or for an
    entry list, an index the layer leaves as its parent's) next to it, as ``<image><suffix>``; the
    digests are streamed to the file, never held as one list of lines."""
    with open(image.with_name(image.name + suffix), "w") as out:
        out.write(f"{chunk_size}\n")
        out.writelines((d or "") + "\n" for d in digests)


def read_chunk_list(image: Path, *, suffix: str = CHUNKS_SUFFIX) -> tuple[int, list[str | None]] | None:
    """What :func:`write_chunk_list` wrote next to ``image``: ``(chunk size, digests)``, or None when it is
    missing, unreadable or does not describe a file of ``image``'s size."""
    try:
        first, *digests = image.with_name(image.name + suffix).read_text().split("\n")[:-1]
        chunk = int(first)
        size = image.stat().st_size
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if chunk <= 0 or len(digests) != -(-size // chunk):
        return None
    return chunk, [d or None for d in digests]


def entry_digests(chunk_map: ChunkMap) -> Iterator[str | None]:
    """One digest per chunk index of ``chunk_map``'s file, in order: an entry's data digest, else None (what
    an interrupted pull's staged file should hold, written as ``<file>.entries`` for ``forkd node``).
    Generated as it goes: a file of many chunks and few entries costs no list of its chunks."""
    upto = 0
    for e in chunk_map.entries:
        if e.digest is not None:
            yield from repeat(None, e.index - upto)
            yield e.digest
            upto = e.index + 1
    yield from repeat(None, -(-chunk_map.size // chunk_map.chunk_size) - upto)


def present_chunks(image: Path) -> dict[str, tuple[int, int]]:
    """``digest -> (offset, length)`` of the chunks the staged ``image`` marks present (unchecked)."""
    listed = read_chunk_list(image)
    try:
        present = image.with_name(image.name + PRESENT_SUFFIX).read_bytes()
        size = image.stat().st_size
    except OSError:
        return {}
    if listed is None or len(present) != len(listed[1]):
        return {}
    chunk, digests = listed
    return {
        d: (i * chunk, min(chunk, size - i * chunk))
        for i, d in enumerate(digests)
        if d and present[i] and i * chunk < size
    }


def write_head_marker(staged: Path, head_digest: str) -> None:
    """Name the head a lazy session's staged directory is for (``forkd node`` reports it as a partial layer)."""
    (staged / HEAD_MARKER).write_text(json.dumps({"head": head_digest}))


def head_marker(staged: Path) -> str | None:
    """The head :func:`write_head_marker` named, if the marker is sound."""
    try:
        head = json.loads((staged / HEAD_MARKER).read_bytes()).get("head")
    except (OSError, ValueError, AttributeError):
        return None
    return head if isinstance(head, str) else None


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
