"""Chunks a running pull on this host has already written: what the peer server serves beyond the chunk index
(docs/mirrors.md, "A fleet with peers", the swarm).

A pull stages each link in ``<store>/.staging/resume-pull-…``; next to each chunked file, ``<file>.entries``
(:func:`~forkd_client.hub.lazystate.write_chunk_list`) lists the digest each chunk of that file should hold once
the pull is done. Where the pull has written a chunk, the bytes are that chunk's, verified on arrival; elsewhere
the file holds the parent's bytes or a hole. No bitmap says which is which, so :meth:`StagedChunks.read` reads the
place the entry list names and **serves the bytes only when their blake3 is the digest asked for**: a chunk not
written yet is simply missing, never wrong bytes.

The digest → (file, offset, length) map is built per staged file and cached by the (inode, size, mtime) of its
entry list and the (inode, size) of the file (a file still being set up, of the wrong size, is skipped and looked
at again on the next request). At most :data:`MAX_FILES` staged files are mapped.

Not thread-safe: one instance per reader thread (:mod:`.peers`). Errors: none raised; an unreadable directory or
file is a missing chunk.
"""

from __future__ import annotations

import os
from pathlib import Path

import blake3

from manifest import mediatypes as mt

from ..hub.lazystate import ENTRIES_SUFFIX, read_chunk_list
from ..install import RESUME_PREFIX

__all__ = ["MAX_FILES", "StagedChunks"]

PULL_DIR = RESUME_PREFIX + "pull-"
#: Staged files mapped at most (a store stages one pull's links at a time; several pulls at most).
MAX_FILES = 256

_Stamp = tuple[int, int, int, int, int]


class StagedChunks:
    """The chunks running pulls staged under ``staging_root`` (module docstring)."""

    def __init__(self, staging_root: Path) -> None:
        self.staging_root = Path(staging_root)
        self._maps: dict[Path, tuple[_Stamp, dict[str, tuple[int, int]]]] = {}

    def refresh(self) -> None:
        """Look at the staged directories again (a request's first miss does: pulls start and end)."""
        seen: dict[Path, tuple[_Stamp, dict[str, tuple[int, int]]]] = {}
        try:
            dirs = sorted(e.path for e in os.scandir(self.staging_root) if e.name.startswith(PULL_DIR))
        except OSError:
            dirs = []
        for directory in dirs:
            for role in mt.CHUNKED_FILES:
                if len(seen) >= MAX_FILES:
                    break
                image = Path(directory) / role
                stamp = _stamp(image)
                if stamp is None:
                    continue
                cached = self._maps.get(image)
                if cached is not None and cached[0] == stamp:
                    seen[image] = cached
                    continue
                listed = read_chunk_list(image, suffix=ENTRIES_SUFFIX)
                if listed is None:
                    continue
                chunk, digests = listed
                size = stamp[4]
                where: dict[str, tuple[int, int]] = {}
                for index, digest in enumerate(digests):
                    if digest is not None and digest not in where:
                        where[digest] = (index * chunk, min(chunk, size - index * chunk))
                seen[image] = (stamp, where)
        self._maps = seen

    def read(self, digest: str) -> bytes | None:
        """The chunk ``digest`` from a staged file, when the bytes there hash to it; else None."""
        for image, (_, where) in self._maps.items():
            place = where.get(digest)
            if place is None:
                continue
            try:
                fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                data = os.pread(fd, place[1], place[0])
            except OSError:
                continue
            finally:
                os.close(fd)
            if len(data) == place[1] and "blake3:" + blake3.blake3(data).hexdigest() == digest:
                return data
        return None


def _stamp(image: Path) -> _Stamp | None:
    try:
        entries = image.with_name(image.name + ENTRIES_SUFFIX).stat()
        data = image.stat()
    except OSError:
        return None
    return (entries.st_ino, entries.st_size, entries.st_mtime_ns, data.st_ino, data.st_size)
