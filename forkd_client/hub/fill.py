"""Fill a link's staged files with its changed chunks: the transfer engine of ``forkd pull``.

Every changed chunk of a layer comes from the first of: the staged file itself (an interrupted
pull left it there; it is read and hashed, never trusted), a local snapshot holding the same
content at any offset (``chunk-index.db``), or the hub. Chunks from the hub are fetched as
coalesced byte ranges of the layer's data blobs (touching frames merged into ranges of at most
FORKD_PULL_RANGE_BYTES, up to 64 ranges per request, FORKD_PULL_PARALLEL requests in flight),
each zstd frame decompressed and hashed against its chunk digest on arrival, then written
straight into place: a killed pull leaves only verified chunks behind.

Errors: DigestInvalid (a corrupt frame, naming layer, file, chunk, blob and offset), HubError
(a bad tuning variable, or the hub's refusals), OSError.
"""

from __future__ import annotations

import bisect
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from manifest.assemble import FileAssembler, decompress_chunk
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.model import ChunkMap

from .client import HubClient
from .errors import DigestInvalid, HubError
from .localchunks import LocalChunkIndex
from .progress import Progress

RANGE_GAP = 0  # frames of one layer are contiguous; only merge touching ranges
MAX_RANGE_BYTES = 8 << 20
PARALLEL_REQUESTS = 4
MAX_RANGES_PER_REQUEST = 64


def tunable(name: str, default: int, minimum: int) -> int:
    """A whole-number setting from the environment (at least ``minimum``). Raises HubError."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit():
        raise HubError(f"{name}={raw!r} is not a whole number of bytes/requests")
    return max(minimum, int(raw))


@dataclass
class FillCounts:
    """Where a link's changed chunks came from."""

    fetched: int = 0  # downloaded from the hub
    local: int = 0  # read from local snapshots holding the same content
    resumed: int = 0  # already in the staged file, from an interrupted pull
    bytes_fetched: int = 0  # frame bytes downloaded


#: per data blob: frame offset -> (frame length, chunk digest, chunk length, [(role, index), …])
Wanted = dict[str, dict[int, tuple[int, str, int, list[tuple[str, int]]]]]


def fill_link(client: HubClient, index: LocalChunkIndex, name: str, layer: str, tag: str,
              maps: dict[str, ChunkMap], assemblers: dict[str, FileAssembler], progress: Progress) -> FillCounts:
    """Write every changed chunk of layer ``layer`` (in repository ``name``) into ``assemblers``."""
    counts = FillCounts()
    wanted: Wanted = {}
    local = index.known(e.digest for m in maps.values() for e in m.entries if not e.is_zero)  # type: ignore[misc]
    for role, chunk_map in maps.items():
        assembler = assemblers[role]
        for e in chunk_map.entries:
            if e.is_zero:
                continue
            if assembler.resumed and assembler.holds(e.index, e.digest):  # type: ignore[arg-type]
                counts.resumed += 1
                continue
            length = assembler.length(e.index)
            blob = chunk_map.blobs[e.blob]
            slot = wanted.get(blob, {}).get(e.offset)
            if slot is not None:  # the same frame at several places of this layer
                slot[3].append((role, e.index))
                continue
            data = index.read(e.digest) if e.digest in local else None
            if data is not None and len(data) == length:
                counts.local += 1
                assembler.write(e.index, data)
            else:
                wanted.setdefault(blob, {})[e.offset] = (e.length, e.digest, length, [(role, e.index)])  # type: ignore[assignment]  # typing debt, decisions/0008
    max_range = tunable("FORKD_PULL_RANGE_BYTES", MAX_RANGE_BYTES, 64 << 10)
    parallel = tunable("FORKD_PULL_PARALLEL", PARALLEL_REQUESTS, 1)
    requests = coalesce(wanted, max_range)
    progress.task(f"pull {tag}", sum(f[0] for frames in wanted.values() for f in frames.values()))
    offsets = {blob: sorted(frames) for blob, frames in wanted.items()}

    def fetch(request: tuple[str, list[tuple[int, int]]]) -> tuple[int, int]:
        blob, ranges = request
        count = nbytes = 0
        for (start, size), data in zip(ranges, client.read_ranges(name, blob, ranges), strict=False):
            frames = offsets[blob]
            for offset in frames[bisect.bisect_left(frames, start) : bisect.bisect_left(frames, start + size)]:
                flen, digest, length, places = wanted[blob][offset]
                frame = data[offset - start : offset - start + flen]
                role, first = places[0]
                try:
                    chunk = decompress_chunk(frame, length, digest, f"{role} chunk {first} ({digest})")  # type: ignore[arg-type]  # typing debt, decisions/0008
                except (DigestMismatch, AssemblyError, ManifestError) as e:
                    raise DigestInvalid(f"layer {layer} ({tag}): {role} chunk {first} ({digest}) from blob {blob} "
                                        f"at offset {offset} is corrupt: {e}") from None
                for where, at in places:
                    assemblers[where].write(at, chunk)
                count += 1
                nbytes += flen
        progress.advance(nbytes)
        return count, nbytes

    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        for count, nbytes in pool.map(fetch, requests):
            counts.fetched += count
            counts.bytes_fetched += nbytes
    finally:
        # On an error or Ctrl-C, requests in flight finish; queued ones never start.
        pool.shutdown(wait=True, cancel_futures=True)
    return counts


def coalesce(wanted: Wanted, max_range: int) -> list[tuple[str, list[tuple[int, int]]]]:
    """Merge touching frames of each blob into ranges of at most ``max_range`` bytes, and group
    up to MAX_RANGES_PER_REQUEST ranges (and about ``max_range`` bytes) per request."""
    requests = []
    for blob, frames in wanted.items():
        current: list[tuple[int, int]] = []
        for offset in sorted(frames):
            n = frames[offset][0]
            if current and current[-1][0] + current[-1][1] + RANGE_GAP >= offset and current[-1][1] + n <= max_range:
                start, _ = current[-1]
                current[-1] = (start, offset + n - start)
            else:
                current.append((offset, n))
        for i in range(0, len(current), MAX_RANGES_PER_REQUEST):
            batch: list[tuple[int, int]] = []
            for r in current[i : i + MAX_RANGES_PER_REQUEST]:
                if batch and sum(n for _, n in batch) + r[1] > max_range:
                    requests.append((blob, batch))
                    batch = []
                batch.append(r)
            requests.append((blob, batch))
    return requests
