"""Fill a link's staged files with its changed chunks: the transfer engine of ``forkd pull``.

Every changed chunk of a layer comes from the first of: the staged file itself (an interrupted
pull left it there; it is read and hashed, never trusted), a local snapshot holding the same
content at any offset (``chunk-index.db``), a fleet peer holding the layer (a pull with peers,
:mod:`.peers`: batches fetched in parallel on the piece workers, each chunk verified by its digest
before it is written; a failing peer is dropped and what it did not deliver goes on to the hub), or
the hub. Chunks from the hub are fetched as
coalesced byte ranges of the layer's data blobs (touching frames merged into ranges of at most
FORKD_PULL_RANGE_BYTES, up to 64 ranges per request, FORKD_PULL_PARALLEL requests in flight).
Two stages overlap: a request to the hub answers with the bytes, a redirect or a fetch plan
(``RepositoryClient.open_ranges``); its frames are then cut into pieces of at most
FORKD_PULL_PIECE_BYTES, and twice FORKD_PULL_PARALLEL piece workers each fetch a piece from the
object store (where the hub redirected or planned), decompress and hash every frame against its
chunk digest, and write it straight into place: a killed pull leaves only verified chunks behind.

Errors: DigestInvalid (a corrupt frame, naming layer, file, chunk, blob and offset), HubError
(a bad tuning variable, or the hub's refusals), OSError.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from manifest.assemble import FileAssembler, decompress_chunk
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.model import ChunkMap

from .errors import DigestInvalid, HubError
from .localchunks import LocalChunkIndex
from .peers import BATCH_BYTES, PeerFailure, PeerSource
from .peerwire import MAX_DIGESTS
from .progress import Progress
from .repository import RepositoryClient
from .swarmfill import fill_with_swarm

RANGE_GAP = 0  # frames of one layer are contiguous; only merge touching ranges
MAX_RANGE_BYTES = 8 << 20
PARALLEL_REQUESTS = 4
MAX_RANGES_PER_REQUEST = 64
PIECE_BYTES = 4 << 20  # frames fetched from the store and verified together, on one worker


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
    """Where a link's changed chunks came from (``bytes_*``: the chunks' own, uncompressed bytes)."""

    fetched: int = 0  # downloaded from the hub
    local: int = 0  # read from local snapshots holding the same content
    resumed: int = 0  # already in the staged file, from an interrupted pull
    peers: int = 0  # from fleet peers, verified
    bytes_fetched: int = 0  # frame bytes downloaded from the hub (compressed)
    bytes_hub: int = 0
    bytes_local: int = 0
    bytes_resumed: int = 0
    bytes_peers: int = 0

    def by_source(self) -> dict[str, int]:
        """Chunk bytes written per source (``forkd pull --json``: ``bytes_by_source``)."""
        return {
            "hub": self.bytes_hub,
            "peers": self.bytes_peers,
            "local": self.bytes_local,
            "resumed": self.bytes_resumed,
        }


class FillPools:
    """The threads that fill the links of one pull: FORKD_PULL_PARALLEL askers (hub requests) and
    twice as many piece workers, started once for the whole pull rather than per link (threads
    start lazily, on the first task that needs one). :meth:`close` when the pull is done.
    Raises HubError (a bad FORKD_PULL_PARALLEL)."""

    def __init__(self) -> None:
        self.parallel = tunable("FORKD_PULL_PARALLEL", PARALLEL_REQUESTS, 1)
        self.askers = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="forkd-ask")
        self.workers = ThreadPoolExecutor(max_workers=2 * self.parallel, thread_name_prefix="forkd-fill")
        # a pull in a swarm (:mod:`.swarmfill`): one thread running the peer rounds, and their requests
        self.swarm = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkd-swarm")
        self.peer_workers = ThreadPoolExecutor(max_workers=2 * self.parallel, thread_name_prefix="forkd-swarm-ask")

    def close(self) -> None:
        """Stop the threads once their tasks are done (queued tasks never start)."""
        for pool in (self.swarm, self.askers, self.workers, self.peer_workers):
            pool.shutdown(wait=True, cancel_futures=True)


#: per data blob: frame offset -> (frame length, chunk digest, chunk length, [(role, index), …])
Wanted = dict[str, dict[int, tuple[int, str, int, list[tuple[str, int]]]]]
#: (data blob, the reader of its hub request, frame offsets): what one worker fetches and verifies
Piece = tuple[str, Callable[[Sequence[tuple[int, int]]], list[memoryview]], list[int]]


@dataclass(frozen=True)
class LinkFiles:
    """What a link's fill writes: layer ``layer`` (pulled as ``tag``), its chunk maps and the
    staged files they fill, by role (``memory.bin``, ``rootfs.ext4``)."""

    layer: str
    tag: str
    maps: dict[str, ChunkMap]
    assemblers: dict[str, FileAssembler]


def fill_link(
    repo: RepositoryClient,
    index: LocalChunkIndex,
    link: LinkFiles,
    progress: Progress,
    pools: FillPools | None = None,
    meanwhile: Callable[[], None] | None = None,
    peers: PeerSource | None = None,
) -> FillCounts:
    """Write every changed chunk of ``link`` (its blobs in repository ``repo``) into its staged files,
    on the threads of ``pools`` (the pull's; else ones started, and stopped, for this link).
    ``meanwhile`` is called on this thread whenever a request or piece is done (and once the
    first requests are out), while the pools move bytes: the pull installs earlier links there.
    What it raises ends the fill as a failed request would. With ``peers``, the chunks still wanted
    after the local ones are asked of the peers holding the layer first, or, where none does, split with the
    hosts pulling it now (:mod:`.swarmfill`)."""
    if pools is None:
        own = FillPools()
        try:
            return fill_link(repo, index, link, progress, own, meanwhile, peers)
        finally:
            own.close()
    fill = LinkFill(repo, link, progress, pools)
    fill.sort_chunks(index)
    if peers is not None:
        fill.from_peers(peers, meanwhile)
        members = peers.members(link.layer) if fill.wanted else None
        if members is not None:
            return fill_with_swarm(fill, peers, members, meanwhile)
    return fill.run(meanwhile)


class LinkFill:
    """One link's fill, read as its stages: :meth:`sort_chunks` (each changed chunk resumed, read
    locally, or wanted from the hub), then :meth:`run`: the wanted frames coalesced into requests,
    :meth:`ask` (one hub request, its frames cut into pieces) and :meth:`verify` (one piece fetched,
    each frame checked and written) overlapping on the pull's pools, settled before it returns."""

    def __init__(self, repo: RepositoryClient, link: LinkFiles, progress: Progress, pools: FillPools) -> None:
        self.repo, self.link, self.progress, self.pools = repo, link, progress, pools
        self.counts = FillCounts()
        self.wanted: Wanted = {}
        self.offsets: dict[str, list[int]] = {}  # per blob, the wanted frames' offsets in order
        self.piece_bytes = PIECE_BYTES  # FORKD_PULL_PIECE_BYTES, read by :meth:`run`

    def sort_chunks(self, index: LocalChunkIndex) -> None:
        """Stage 1: every changed chunk is resumed (the staged file already holds it), written from a
        local snapshot holding the same content (``index``), or wanted from the hub (once per frame,
        however many places of the layer hold it)."""
        maps, counts, wanted = self.link.maps, self.counts, self.wanted
        local = index.known(e.digest for m in maps.values() for e in m.entries if not e.is_zero)  # type: ignore[misc]
        for role, chunk_map in maps.items():
            assembler = self.link.assemblers[role]
            for e in chunk_map.entries:
                if e.is_zero:
                    continue
                length = assembler.length(e.index)
                if assembler.resumed and assembler.holds(e.index, e.digest):  # type: ignore[arg-type]
                    counts.resumed += 1
                    counts.bytes_resumed += length
                    continue
                blob = chunk_map.blobs[e.blob]
                slot = wanted.get(blob, {}).get(e.offset)
                if slot is not None:  # the same frame at several places of this layer
                    slot[3].append((role, e.index))
                    continue
                data = index.read(e.digest) if e.digest in local else None
                if data is not None and len(data) == length:
                    counts.local += 1
                    counts.bytes_local += length
                    assembler.write(e.index, data)
                else:
                    wanted.setdefault(blob, {})[e.offset] = (e.length, e.digest, length, [(role, e.index)])  # type: ignore[assignment]  # typing debt, decisions/0008
        self.offsets = {blob: sorted(frames) for blob, frames in wanted.items()}

    def from_peers(self, peers: PeerSource, meanwhile: Callable[[], None] | None = None) -> None:
        """Stage 1b (a pull with peers): the wanted chunks in batches spread over the live peers holding the
        layer, fetched in parallel on the piece workers; each chunk a peer delivers verified is written and
        no longer wanted. A peer that fails is dropped (:mod:`.peers`); what it did not deliver stays wanted.
        ``meanwhile`` is called as batches complete (as :meth:`run` does)."""
        if not self.wanted or not peers.live(self.link.layer):
            return
        batches: list[list[tuple[str, int]]] = [[]]
        size = 0
        for blob, frames in self.wanted.items():
            for offset, frame in frames.items():
                if len(batches[-1]) >= MAX_DIGESTS or (batches[-1] and size + frame[2] > BATCH_BYTES):
                    batches.append([])
                    size = 0
                batches[-1].append((blob, offset))
                size += frame[2]
        self.progress.task(f"peers {self.link.tag}", sum(self.wanted[b][o][2] for batch in batches for b, o in batch))
        urls = peers.spread(self.link.layer, len(batches))  # one per batch, or none when every peer was dropped
        futures = [
            self.pools.workers.submit(self._peer_batch, peers, url, batch)
            for url, batch in zip(urls, batches if urls else [], strict=True)
        ]
        try:
            pending = set(futures)
            while pending:
                if meanwhile is not None:
                    meanwhile()
                _, pending = wait(pending, return_when=FIRST_COMPLETED)
            done = [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()
            wait(futures)
        for filled in done:
            for blob, offset in filled:
                length = self.wanted[blob].pop(offset)[2]
                self.counts.peers += 1
                self.counts.bytes_peers += length
        self.wanted = {blob: frames for blob, frames in self.wanted.items() if frames}
        self.offsets = {blob: sorted(frames) for blob, frames in self.wanted.items()}

    def _peer_batch(
        self, peers: PeerSource, url: str, batch: list[tuple[str, int]], wanted: Wanted | None = None
    ) -> list[tuple[str, int]]:
        """One batch from one peer: the (blob, offset) frames (of ``wanted``, else this fill's) whose chunk it
        delivered, verified and written."""
        if peers.is_dropped(url):
            return []
        frames = [(self.wanted if wanted is None else wanted)[blob][offset] for blob, offset in batch]
        try:
            chunks = peers.fetch(url, [(digest, length) for _, digest, length, _ in frames])
        except PeerFailure as e:
            peers.drop(url, str(e))
            self.progress.log(f"peers: dropped {url} for the rest of this pull ({e}); its chunks come from the hub")
            return []
        filled, nbytes = [], 0
        for (blob, offset), (_, _, length, places), chunk in zip(batch, frames, chunks, strict=True):
            if chunk is None:
                continue
            for where, index in places:
                self.link.assemblers[where].write(index, chunk)
            filled.append((blob, offset))
            nbytes += length
        if nbytes:
            peers.delivered(url, nbytes)
        self.progress.advance(nbytes)
        return filled

    def ask(self, request: tuple[str, list[tuple[int, int]]]) -> list[Future[tuple[int, int, int]]]:
        """Stage 2: one hub request; its frames cut into pieces of at most ``piece_bytes``, each handed
        to a piece worker at once (the fetching never waits for this function's caller)."""
        blob, ranges = request
        read = self.repo.open_ranges(blob, ranges)
        frames, pieces, wanted = self.offsets[blob], [], self.wanted
        for start, size in ranges:
            group: list[int] = []
            for offset in frames[bisect.bisect_left(frames, start) : bisect.bisect_left(frames, start + size)]:
                if group and offset + wanted[blob][offset][0] - group[0] > self.piece_bytes:
                    pieces.append((blob, read, group))
                    group = []
                group.append(offset)
            if group:
                pieces.append((blob, read, group))
        return [self.pools.workers.submit(self.verify, piece) for piece in pieces]

    def verify(self, piece: Piece) -> tuple[int, int, int]:
        """Stage 3: fetch a piece (where the hub redirected or planned), verify each frame, write its chunk."""
        blob, read, group = piece
        frames = self.wanted[blob]
        first, last = group[0], group[-1]
        data = read([(first, last + frames[last][0] - first)])[0]
        nbytes = chunk_bytes = 0
        for offset in group:
            flen, digest, length, places = frames[offset]
            role, at = places[0]
            try:
                chunk = decompress_chunk(
                    data[offset - first : offset - first + flen],  # type: ignore[arg-type]  # typing debt, decisions/0008
                    length,
                    digest,
                    f"{role} chunk {at} ({digest})",
                )
            except (DigestMismatch, AssemblyError, ManifestError) as e:
                raise DigestInvalid(
                    f"layer {self.link.layer} ({self.link.tag}): {role} chunk {at} ({digest}) from blob {blob} "
                    f"at offset {offset} is corrupt: {e}"
                ) from None
            for where, index in places:
                self.link.assemblers[where].write(index, chunk)
            nbytes += flen
            chunk_bytes += length
        self.progress.advance(nbytes)
        return len(group), nbytes, chunk_bytes

    def run(self, meanwhile: Callable[[], None] | None, *, task: bool = True) -> FillCounts:
        """Stages 2 and 3 overlapping: ``parallel`` hub requests (bytes, or a redirect / fetch plan),
        each handing its pieces straight to twice as many piece workers fetching from the store and
        verifying. At most 2 * ``parallel`` requests are open (asked, or with pieces not done), which
        bounds what a hub serving bytes buffers. ``task``: begin a progress task of its own."""
        max_range = tunable("FORKD_PULL_RANGE_BYTES", MAX_RANGE_BYTES, 64 << 10)
        self.piece_bytes = tunable("FORKD_PULL_PIECE_BYTES", PIECE_BYTES, 64 << 10)
        requests = coalesce(self.wanted, max_range)
        if task:
            self.progress.task(
                f"pull {self.link.tag}", sum(f[0] for frames in self.wanted.values() for f in frames.values())
            )
        parallel, askers, counts = self.pools.parallel, self.pools.askers, self.counts
        todo = iter(enumerate(requests))
        asking: dict[Future, int] = {}
        working: dict[Future, int] = {}
        left: dict[int, int] = {}  # open request -> its pieces not done yet
        drain = False
        try:
            while True:
                while len(left) < 2 * parallel and (nxt := next(todo, None)) is not None:
                    asking[askers.submit(self.ask, nxt[1])] = nxt[0]
                    left[nxt[0]] = -1  # asked, pieces not known yet
                if meanwhile is not None:
                    meanwhile()
                if not asking and not working:
                    break
                done, _ = wait([*asking, *working], return_when=FIRST_COMPLETED)
                # answered requests first, in their order: when one request fails, the pieces of the
                # requests before it are already queued (and are written, below)
                for future in sorted(done, key=lambda f: asking.get(f, len(requests))):
                    if future in asking:
                        number = asking.pop(future)
                        pieces = future.result()
                        left[number] = len(pieces)
                        for piece in pieces:
                            working[piece] = number
                        if not pieces:
                            del left[number]
                    else:
                        number = working.pop(future)
                        count, nbytes, chunk_bytes = future.result()
                        counts.fetched += count
                        counts.bytes_fetched += nbytes
                        counts.bytes_hub += chunk_bytes
                        left[number] -= 1
                        if not left[number]:
                            del left[number]
        except BaseException as e:
            drain = isinstance(e, Exception)
            raise
        finally:
            self._settle(asking, working, drain)
        return counts

    @staticmethod
    def _settle(asking: dict[Future, int], working: dict[Future, int], drain: bool) -> None:
        """On an error, pieces already queued are still verified and written (what a resumed pull
        keeps), requests not asked yet never start; on Ctrl-C (``drain`` false) queued pieces are
        dropped too. Either way this link's tasks are settled before it returns (the pools outlive it)."""
        for future in asking:
            future.cancel()
        wait(asking)
        for future in asking:  # requests answered meanwhile queued their pieces too
            if not future.cancelled() and future.exception() is None:
                working.update((piece, -1) for piece in future.result())
        if not drain:
            for future in working:
                future.cancel()
        wait(working)


def coalesce(wanted: Wanted, max_range: int, gap: int = RANGE_GAP) -> list[tuple[str, list[tuple[int, int]]]]:
    """Merge frames of each blob at most ``gap`` bytes apart (default: touching ones) into ranges
    of at most ``max_range`` bytes, and group up to MAX_RANGES_PER_REQUEST ranges (and about
    ``max_range`` bytes) per request. A gap's bytes are fetched and not used."""
    requests = []
    for blob, frames in wanted.items():
        current: list[tuple[int, int]] = []
        for offset in sorted(frames):
            n = frames[offset][0]
            if current and current[-1][0] + current[-1][1] + gap >= offset and offset + n - current[-1][0] <= max_range:
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
