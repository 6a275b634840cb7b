"""A link filled with the hosts pulling it at the same time: the swarm (docs/mirrors.md, "A fleet with peers").

:func:`fill_with_swarm` runs where no live peer holds the layer whole and the hub named a swarm of n > 1 hosts
pulling it now, this one included (:meth:`.peers.PeerSource.members`; the same list, sorted by host name, for
every member). The layer's data blobs are cut into **runs** of :data:`RUN_BYTES` (by frame offset), and the frames
of run ``r`` of blob ``b`` are **owned** by ``members[(r + h(b)) mod n]``, ``h(b)`` the first 8 bytes of the blob's
digest as an integer: every member computes the same split from the same chunk maps, the hub sends each chunk
about once, and each host's share is a set of contiguous ranges (one hub range per run, not a frame here and
there: ownership by chunk digest made a host's share of 1/n of the frames cost the hub n times the requests):

- the chunks this host owns come from the hub (:meth:`.fill.LinkFill.run`, on that subset);
- meanwhile, on the pull's swarm thread, the other chunks are asked of their owners in rounds (one request of at
  most ``MAX_DIGESTS`` chunks and ``BATCH_BYTES`` open per owner, on the pull's ``peer_workers``): what an owner
  delivers, verified by its digest, is written; what it reports missing (not pulled yet: its node agent serves
  what its pull staged, :mod:`forkd_client.node.staged`) is asked again after a pause growing from
  :data:`PAUSE_S` to :data:`MAX_PAUSE_S`;
- an owner that fails in any way (dropped, :mod:`.peers`) gives its remaining chunks to the hub path at once, and
  one that delivers nothing new for ``FORKD_PEERS_STALL`` seconds (:attr:`.peers.PeerOptions.stall`) once this
  host's own part is in (the clock starts at the later of its last delivery and that moment: this host's hub
  path is busy until then anyway, so a slow start costs nothing) gives them too; they are fetched from the hub
  after the owned part. Rounds go on after the hub part is done only while owners progress.

A lying or dead member costs time, never correctness: every chunk is verified as a hub frame is, and every chunk
not delivered is fetched from the hub. Errors: those of :meth:`.fill.LinkFill.run` (a failing hub request, a
corrupt frame, OSError); a failing owner is dropped, not raised.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .peers import BATCH_BYTES, PeerSource
from .peerwire import MAX_DIGESTS

if TYPE_CHECKING:
    from collections.abc import Callable

    from .fill import FillCounts, LinkFill, Wanted

__all__ = ["MAX_PAUSE_S", "PAUSE_S", "RUN_BYTES", "fill_with_swarm", "owner_of"]

#: The blob bytes (frame offsets) one owner's run covers.
RUN_BYTES = 1 << 20
#: The first pause before asking an owner again for chunks it lacked, and the longest (doubling while it has nothing
#: new: 16 hosts re-asking 15 owners every 0.2 s at most spent 2.6x the CPU of pulling from the hub alone, on these
#: 2 cores, bench/fleet_pull.py; 1 s brought it to 1.9x and the time from 2.4x to 1.2x of the hub's).
PAUSE_S = 0.05
MAX_PAUSE_S = 1.0
Key = tuple[str, int]  # (data blob, frame offset)


def owner_of(blob: str, offset: int, members: int) -> int:
    """The index in the swarm's sorted member list of the host owning the frame at ``offset`` of ``blob``."""
    return (offset // RUN_BYTES + int(blob.split(":")[-1][:16], 16)) % members


@dataclass
class _Owner:
    url: str
    pending: dict[Key, None] = field(default_factory=dict)  # in the order asked (the owner's fetch order)
    last: float = 0.0  # when it last delivered something new
    pause: float = PAUSE_S
    next_at: float = 0.0
    asked: int = 0  # chunks in the request open or last made
    future: Future[list[Key]] | None = None


def fill_with_swarm(
    fill: LinkFill, peers: PeerSource, members: list[tuple[str, str]], meanwhile: Callable[[], None] | None
) -> FillCounts:
    """Fill ``fill``'s wanted chunks: this host's share from the hub, the others' from their owners (module
    docstring). Returns the fill's counts."""
    theirs: Wanted = {}
    owners: dict[str, _Owner] = {}
    me = peers.options.host
    for blob, frames in fill.wanted.items():
        for offset in list(frames):
            host, url = members[owner_of(blob, offset, len(members))]
            if host != me:
                theirs.setdefault(blob, {})[offset] = frames.pop(offset)
                owners.setdefault(url, _Owner(url)).pending[(blob, offset)] = None
    fill.wanted = {blob: frames for blob, frames in fill.wanted.items() if frames}
    fill.offsets = {blob: sorted(frames) for blob, frames in fill.wanted.items()}
    total = sum(f[0] for part in (fill.wanted, theirs) for frames in part.values() for f in frames.values())
    fill.progress.task(f"pull {fill.link.tag} (swarm of {len(members)})", total)
    stop = threading.Event()
    own_done: list[float] = []  # when this host's own part was in
    rounds = fill.pools.swarm.submit(_rounds, fill, peers, owners, theirs, stop, own_done)
    try:
        fill.run(meanwhile, task=False)
        own_done.append(time.monotonic())
        while not rounds.done():  # the owned part is in: the rounds go on while owners deliver
            wait([rounds], timeout=0.1)
            if meanwhile is not None:
                meanwhile()
    except BaseException:  # a failed hub request, a failed install, Ctrl-C: no more rounds
        stop.set()
        wait([rounds])
        raise
    fallback, chunks, nbytes = rounds.result()
    fill.counts.peers += chunks
    fill.counts.bytes_peers += nbytes
    if fallback:
        fill.wanted = {}
        for blob, offset in fallback:
            fill.wanted.setdefault(blob, {})[offset] = theirs[blob][offset]
        fill.offsets = {blob: sorted(frames) for blob, frames in fill.wanted.items()}
        fill.run(meanwhile, task=False)
    return fill.counts


def _rounds(
    fill: LinkFill,
    peers: PeerSource,
    owners: dict[str, _Owner],
    theirs: Wanted,
    stop: threading.Event,
    own_done: list[float],
) -> tuple[list[Key], int, int]:
    """Ask each owner for its chunks until it delivered them, stalled or failed (module docstring). Returns the
    chunks left for the hub, and the chunks and chunk bytes delivered."""
    stall = peers.options.stall
    fallback: list[Key] = []
    chunks = nbytes = 0
    start = time.monotonic()
    for owner in owners.values():
        owner.last = start
    try:
        while True:
            now = time.monotonic()
            for owner in owners.values():
                if owner.future is not None or not owner.pending:
                    continue
                stalled = bool(own_done) and now - max(owner.last, own_done[0]) > stall
                if stop.is_set() or stalled or peers.is_dropped(owner.url):
                    if stalled and not stop.is_set() and not peers.is_dropped(owner.url):
                        fill.progress.log(
                            f"peers: {owner.url} delivered nothing new for {stall:g} s; "
                            f"its {len(owner.pending)} chunk(s) of {fill.link.tag} come from the hub"
                        )
                    fallback.extend(owner.pending)
                    owner.pending.clear()
                elif now >= owner.next_at:
                    batch = _batch(owner.pending, theirs)
                    owner.asked = len(batch)
                    owner.future = fill.pools.peer_workers.submit(fill._peer_batch, peers, owner.url, batch, theirs)
            inflight = [o.future for o in owners.values() if o.future is not None]
            resting = [o.next_at for o in owners.values() if o.future is None and o.pending]
            if not inflight and not resting:
                return fallback, chunks, nbytes
            timeout = min(max(0.005, min(resting, default=now + stall) - now), stall)
            if inflight:
                wait(inflight, timeout=timeout, return_when=FIRST_COMPLETED)
            else:
                stop.wait(timeout)
            now = time.monotonic()
            for owner in owners.values():
                if owner.future is None or not owner.future.done():
                    continue
                got = owner.future.result()
                owner.future = None
                for blob, offset in got:
                    owner.pending.pop((blob, offset), None)
                    chunks += 1
                    nbytes += theirs[blob][offset][2]
                if got:
                    owner.last, owner.pause = now, PAUSE_S
                    # all asked delivered: straight on; some missing: the owner is still pulling them
                    owner.next_at = now if len(got) == owner.asked else now + PAUSE_S
                else:
                    owner.next_at = now + owner.pause
                    owner.pause = min(2 * owner.pause, MAX_PAUSE_S)
    finally:
        wait([o.future for o in owners.values() if o.future is not None])


def _batch(pending: dict[Key, None], theirs: Wanted) -> list[Key]:
    """The first pending chunks, at most MAX_DIGESTS of them and BATCH_BYTES of chunk bytes."""
    batch: list[Key] = []
    size = 0
    for blob, offset in pending:
        length = theirs[blob][offset][2]
        if len(batch) >= MAX_DIGESTS or (batch and size + length > BATCH_BYTES):
            break
        batch.append((blob, offset))
        size += length
    return batch
