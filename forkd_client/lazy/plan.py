"""Where each chunk of a chain head's file (``memory.bin``, ``rootfs.ext4``) comes from, and which
hub requests fetch a set of them.

A chain's head file is the file of the link that starts it (the base, or the first link of the
run of links that have it) with each later link's changed chunks applied in order, so chunk ``i``
of the head is the entry for ``i`` in the last chunk map that lists it: a data chunk (a zstd frame
at an offset of a layer's data blob, checked against its digest on arrival), a zero chunk, or,
when no map lists it, zero (a starting link's unlisted chunk is a hole). :func:`file_links` picks
those links as a pull assembles them; :class:`ImagePlan` holds the table;
:meth:`ImagePlan.requests` groups chunks into coalesced range requests, per repository and blob,
with :func:`forkd_client.hub.fill.coalesce` (the same limits as a pull).

Errors: LazyUnsupported (chunk geometry that changes along the chain), HubError (a link's file
that applies to a parent file the chain does not have).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from manifest import mediatypes as mt
from manifest.model import ChunkMap, LayerConfig

from ..hub.errors import HubError
from ..hub.fill import RANGE_GAP, Wanted, coalesce
from .errors import LazyUnsupported

#: one link as a plan reads it: (layer digest, repository, the file's chunk map or None when the
#: link leaves the file as it is)
PlanLink = tuple[str, str, ChunkMap | None]
#: one link as :func:`file_links` reads it: (layer digest, repository, config, its chunk maps by role)
ChainFiles = tuple[str, str, LayerConfig, dict[str, ChunkMap]]


def file_links(file: str, links: Sequence[ChainFiles]) -> list[PlanLink]:
    """The links, base → head, that make the head's ``file``, as a pull assembles it: the run of
    links ending at the head whose configs list the file (a link builds on its parent's file when
    the parent has one). ``links``: ``(layer digest, repository, config, chunk maps)``, base →
    head. Raises HubError when the first link of that run has a map that applies to a parent file
    (its parent has none: a pull refuses that chain the same way)."""
    start = len(links)
    while start > 0 and file in links[start - 1][2].files:
        start -= 1
    run = [(layer, repository, maps.get(file)) for layer, repository, _, maps in links[start:]]
    if run and start > 0 and run[0][2] is not None and run[0][2].parent_digest is not None:
        raise HubError(f"layer {run[0][0]}: {file} applies to a parent file this chain does not have")
    return run


class ChunkSource(NamedTuple):
    """A data chunk of the head's image: which layer lists it, and where its frame is (a tuple:
    a plan makes one per chunk, tens of thousands, before a lazy fork's first answer)."""

    layer: str  # manifest digest of the layer
    repository: str  # where the hub keeps the layer's blobs
    blob: str
    offset: int  # of the frame in the blob
    length: int  # of the frame
    digest: str  # of the chunk's bytes


#: one hub request: (repository, blob, [(offset, length), …]) of whole frames
Request = tuple[str, str, list[tuple[int, int]]]


class ImagePlan:
    """One of the head's files as a table of chunk sources (None: zero)."""

    def __init__(self, size: int, chunk_size: int, sources: list[ChunkSource | None]) -> None:
        self.size, self.chunk_size, self.sources = size, chunk_size, sources

    @classmethod
    def from_maps(cls, links: Sequence[PlanLink], file: str = mt.MEMORY_FILE) -> ImagePlan:
        """``links``: base → head, ``(layer digest, repository, the chunk map of ``file`` or None
        when the link leaves the file as it is)`` (see :func:`file_links`). Raises LazyUnsupported
        when the file's size or chunk size changes along the chain (a pull handles that; a lazy
        fork does not), or no link has a map of it."""
        geometry: tuple[int, int] | None = None
        sources: list[ChunkSource | None] = []
        for layer, repository, chunk_map in links:
            if chunk_map is None:
                continue
            if geometry is None:
                geometry = (chunk_map.size, chunk_map.chunk_size)
                sources = [None] * -(-chunk_map.size // chunk_map.chunk_size)
            elif geometry != (chunk_map.size, chunk_map.chunk_size):
                raise LazyUnsupported(
                    f"layer {layer}: {file} is {chunk_map.size:,} bytes in chunks of "
                    f"{chunk_map.chunk_size:,}, its parent's {geometry[0]:,} in chunks of {geometry[1]:,}; "
                    "a lazy fork needs one geometry along the chain (use forkd pull, then forkd fork)"
                )
            blobs = chunk_map.blobs
            for e in chunk_map.entries:
                digest = e.digest
                sources[e.index] = (
                    None
                    if digest is None
                    else ChunkSource(layer, repository, blobs[e.blob], e.offset, e.length, digest)
                )
        if geometry is None:
            raise LazyUnsupported(f"no layer of the chain has a {file}: nothing to serve it from")
        return cls(geometry[0], geometry[1], sources)

    @property
    def count(self) -> int:
        return len(self.sources)

    def length(self, index: int) -> int:
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def covering(self, offset: int, size: int) -> range:
        """The chunk indexes a read of ``size`` bytes at ``offset`` touches (clipped to the image)."""
        end = min(offset + size, self.size)
        if offset >= end:
            return range(0)
        return range(offset // self.chunk_size, (end - 1) // self.chunk_size + 1)

    def data_chunks(self) -> list[int]:
        return [i for i, s in enumerate(self.sources) if s is not None]

    def requests(
        self, indexes: Iterable[int], max_range: int, gap: int = RANGE_GAP
    ) -> tuple[list[Request], dict[tuple[str, int], list[int]]]:
        """Coalesced hub requests for the data chunks ``indexes`` (zero chunks are skipped; frames
        at most ``gap`` bytes apart share a range), and for each ``(blob, frame offset)`` the chunk
        indexes that frame fills (the same frame may fill several places of the image)."""
        per_repo: dict[str, Wanted] = {}
        places: dict[tuple[str, int], list[int]] = {}
        for i in indexes:
            s = self.sources[i]
            if s is None:
                continue
            at = places.setdefault((s.blob, s.offset), [])
            if not at:
                per_repo.setdefault(s.repository, {}).setdefault(s.blob, {})[s.offset] = (
                    s.length,
                    s.digest,
                    self.length(i),
                    [],
                )
            at.append(i)
        out = [
            (repository, blob, ranges)
            for repository, wanted in per_repo.items()
            for blob, ranges in coalesce(wanted, max_range, gap)
        ]
        return out, places
