"""Chunks from fleet peers during a pull (docs/mirrors.md, "A fleet with peers"; the framing in :mod:`.peerwire`).

Opt-in per host: ``forkd pull --peers``, ``FORKD_PEERS=1`` or ``enabled = true`` in the ``[peers]`` table of the
client's config.toml (:func:`peer_options`, :mod:`.peerconfig`), with the fleet token in ``FORKD_FLEET_TOKEN``. A pull with peers asks the hub **once** which peers hold the layers it will fetch
(:meth:`PeerSource.ask_hub`; a hub without the route, or any refusal, means no peers, never a failed pull).
For each link, the chunks no staged or local file holds are cut into batches (at most ``MAX_DIGESTS`` chunks
and :data:`BATCH_BYTES`), spread round robin over the peers holding that layer and fetched in parallel on the
pull's fill threads, at most :data:`PER_PEER` requests open to one peer (:meth:`~forkd_client.hub.fill.LinkFill.from_peers`).

**A peer is untrusted.** Every record is checked against the chunk it answers (length, then blake3 of the
exact bytes: the check a frame from the hub gets) before it is written into place. On **any** failure of a
peer (refused, an HTTP status other than 200, no answer within the per-request deadline ``FORKD_PEERS_TIMEOUT``
(5 s; a whole request, not a socket read), a body over its bound, broken framing, a wrong or truncated chunk)
the peer is dropped for the rest of the pull (:meth:`PeerSource.drop`, with the reason), and every chunk it
did not deliver verified goes the hub's way. A chunk the peer says it lacks also goes to the hub; the peer stays.

**The swarm** (hosts pulling one chain at once, :mod:`.swarmfill`): the ask says ``pulling: true`` with this host's
name (``FORKD_PEERS_HOST``, else the host name: the name its node agent reports), and the hub answers each layer's
swarm too, the hosts pulling it now, sorted by name. Where no live peer holds a layer whole and the swarm has more
than one member, this one included, :meth:`PeerSource.members` hands the list to the fill, which takes from the
hub only the chunks this host owns and asks the other chunks of their owners while they pull; an owner that
delivers nothing new for ``FORKD_PEERS_STALL`` seconds (10) gives its chunks back to the hub path.

Errors: :class:`~forkd_client.errors.UsageError` from :func:`peer_options` (peers on without a fleet token, a
bad ``FORKD_PEERS_TIMEOUT``, ``FORKD_PEERS_STALL`` or ``FORKD_PEERS_WINDOW``). Nothing else: a failing peer is dropped, not raised.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import UsageError
from .configfile import config_file
from .errors import HubError
from .peerconfig import read_peer_table
from .peerwire import (
    CONTENT_TYPE,
    MAGIC,
    MAX_DIGESTS,
    PATH,
    PeerWireError,
    authorization,
    chunk_matches,
    parse_records,
)
from .progress import Progress
from .repository import RepositoryClient

__all__ = ["BATCH_BYTES", "PER_PEER", "PeerFailure", "PeerOptions", "PeerSource", "peer_options"]

PEERS_ENV = "FORKD_PEERS"
TIMEOUT_ENV = "FORKD_PEERS_TIMEOUT"
FLEET_TOKEN_ENV = "FORKD_FLEET_TOKEN"
HOST_ENV = "FORKD_PEERS_HOST"
STALL_ENV = "FORKD_PEERS_STALL"
WINDOW_ENV = "FORKD_PEERS_WINDOW"
DEFAULT_TIMEOUT_S = 5.0
#: Seconds a swarm member may deliver nothing new before its chunks go to the hub.
DEFAULT_STALL_S = 10.0  # 3 s: 16 hosts on 2 busy cores took 1.9x a chain from the hub (bench/fleet_pull.py)
#: Chunk bytes one peer request asks for at most (64 chunks of 64 KiB).
BATCH_BYTES = 4 << 20
#: Requests one pull has open to one peer at most (a peer serves 16 at once, and other pullers too).
PER_PEER = 4
_READ = 1 << 20


@dataclass(frozen=True)
class PeerOptions:
    """How a pull uses peers: the fleet ``token``, the per-request ``timeout`` (seconds), this host's
    name (``host``: left out of the holders, its place in the swarm), and the swarm's ``stall`` (seconds)."""

    token: str
    timeout: float = DEFAULT_TIMEOUT_S
    host: str | None = None
    stall: float = DEFAULT_STALL_S
    window: float | None = None  # the longest this pull lets the hub hold its ask for a cohort (None: the hub's)


def peer_options(flag: bool, env: Mapping[str, str] | None = None, config: Path | None = None) -> PeerOptions | None:
    """The pull's peer options: on with ``flag`` (``--peers``) or ``FORKD_PEERS=1`` (else ``enabled`` in the
    ``[peers]`` table of ``config``, default the client's config.toml: :mod:`.peerconfig`; each variable wins over
    its key), else None. Raises UsageError (on without ``FORKD_FLEET_TOKEN``, a bad ``FORKD_PEERS_TIMEOUT`` or
    ``FORKD_PEERS_STALL``, a bad key of the table)."""
    env = os.environ if env is None else env
    table = read_peer_table(config if config is not None else config_file())
    raw_on = env.get(PEERS_ENV)
    if raw_on is not None and raw_on.strip():
        enabled = flag or raw_on.strip().lower() in ("1", "true", "yes", "on")
    else:
        enabled = flag or bool(table.get("enabled", False))
    if not enabled:
        return None
    token = (env.get(FLEET_TOKEN_ENV) or "").strip()
    if not token:
        raise UsageError(
            f"pulling with peers needs the fleet token in {FLEET_TOKEN_ENV} (or drop --peers / {PEERS_ENV})"
        )
    where = config if config is not None else config_file()
    timeout = _seconds(env, TIMEOUT_ENV, table.get("timeout"), f"{where}: peers.timeout", DEFAULT_TIMEOUT_S)
    stall = _seconds(env, STALL_ENV, table.get("stall"), f"{where}: peers.stall", DEFAULT_STALL_S)
    host = (env.get(HOST_ENV) or "").strip() or str(table.get("host") or "").strip()
    window = None
    if (raw := env.get(WINDOW_ENV)) is not None:
        try:
            window = float(raw)
        except ValueError:
            window = -1.0
        if not 0 <= window <= 10:
            raise UsageError(f"{WINDOW_ENV}={raw!r}: seconds, from 0 to 10")
    return PeerOptions(token, timeout, host or socket.gethostname().split(".")[0] or None, stall, window)


def _seconds(env: Mapping[str, str], name: str, configured: object, key: str, default: float) -> float:
    raw = env.get(name)
    if raw is None:
        if configured is None:
            return default
        raw, name = str(configured), key
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        raise UsageError(f"{name}={raw!r}: seconds, more than 0 and at most 600")
    return value


class PeerFailure(Exception):
    """One peer request failed (the message says how); the peer is dropped."""


@dataclass
class PeerSource:
    """The peers of one pull (module docstring): layer → peer URLs, what each delivered, who was dropped and why.
    Thread-safe: the fill threads share it."""

    options: PeerOptions
    holders: dict[str, list[str]] = field(default_factory=dict)
    swarm: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # layer -> [(host, url)], sorted
    swarm_size: int = 0  # the largest swarm a link of this pull split its chunks over
    bytes_by_peer: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    requests: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, threading.Semaphore] = {}
        self._turn = 0

    @classmethod
    def ask_hub(
        cls, repo: RepositoryClient, layers: Sequence[str], options: PeerOptions, progress: Progress
    ) -> PeerSource:
        """Ask the hub once which peers hold ``layers`` (module docstring); no peers when it cannot say."""
        source = cls(options)
        if not layers:
            return source
        try:
            answer, swarm = repo.ask_peers(
                list(layers)[:64], options.host, pulling=options.host is not None, window=options.window
            )
        except HubError as e:
            progress.log(f"peers: the hub named none ({e}); pulling from the hub")
            return source
        for layer, found in answer.items():
            urls = [url for _, url in found if urlsplit(url).scheme in ("http", "https")]
            if urls:
                source.holders[layer] = list(dict.fromkeys(urls))
        for layer, members in swarm.items():
            usable = [(h, u) for h, u in members if urlsplit(u).scheme in ("http", "https")]
            if len(usable) == len(members) and len({h for h, _ in usable}) == len(usable):
                source.swarm[layer] = usable  # every member must see the same list: a bad one voids it
        count = len({u for urls in source.holders.values() for u in urls})
        pulling = max((len(m) for m in source.swarm.values()), default=0)
        progress.log(
            f"peers: {count} peer(s) hold {len(source.holders)} of {len(layers)} layer(s) to fetch"
            + (f"; a swarm of {pulling} host(s) pulls them now" if pulling > 1 else "")
        )
        return source

    def members(self, layer: str) -> list[tuple[str, str]] | None:
        """The swarm to split ``layer``'s chunks over: its members (host, url) when no live peer holds it
        whole, it has more than one member and this host is one of them; else None."""
        members = self.swarm.get(layer, [])
        if self.live(layer) or len(members) < 2 or self.options.host not in {h for h, _ in members}:
            return None
        with self._lock:
            self.swarm_size = max(self.swarm_size, len(members))
        return members

    def live(self, layer: str) -> list[str]:
        """The peers holding ``layer`` not dropped yet."""
        with self._lock:
            return [u for u in self.holders.get(layer, []) if u not in self.dropped]

    def spread(self, layer: str, batches: int) -> list[str]:
        """A live peer of ``layer`` for each of ``batches`` batches, round robin, carried on from the previous
        link's (so single-batch links still use every peer)."""
        urls = self.live(layer)
        if not urls:
            return []
        with self._lock:
            start, self._turn = self._turn, self._turn + batches
        return [urls[(start + i) % len(urls)] for i in range(batches)]

    def is_dropped(self, url: str) -> bool:
        with self._lock:
            return url in self.dropped

    def drop(self, url: str, reason: str) -> None:
        """No more requests to ``url`` in this pull (the first reason is kept)."""
        with self._lock:
            self.dropped.setdefault(url, reason)

    def delivered(self, url: str, nbytes: int) -> None:
        with self._lock:
            self.bytes_by_peer[url] = self.bytes_by_peer.get(url, 0) + nbytes

    def fetch(self, url: str, wanted: Sequence[tuple[str, int]]) -> list[memoryview | None]:
        """The chunks ``wanted`` (digest, length) from ``url``, each verified (None: the peer lacks it).
        Raises PeerFailure (the caller drops the peer: module docstring)."""
        with self._lock:
            self.requests += 1
            slots = self._slots.setdefault(url, threading.Semaphore(PER_PEER))
        with slots:
            if self.is_dropped(url):  # another batch failed while this one waited
                return [None] * len(wanted)
            body = _request(url, self.options, [d for d, _ in wanted], len(MAGIC) + sum(4 + n for _, n in wanted))
        out: list[memoryview | None] = []
        try:
            for i, record in enumerate(parse_records(body, [n for _, n in wanted])):
                if record is not None and not chunk_matches(record, wanted[i][0]):
                    raise PeerFailure(f"chunk {wanted[i][0]} does not match its digest")
                out.append(None if record is None else record)
        except PeerWireError as e:
            raise PeerFailure(str(e)) from None
        return out


def _request(url: str, options: PeerOptions, digests: list[str], bound: int) -> bytearray:
    """POST the digests; the body (at most ``bound`` bytes) within ``options.timeout`` seconds in all.
    Raises PeerFailure."""
    if len(digests) > MAX_DIGESTS:  # pragma: no cover - batches are cut to fit
        raise PeerFailure(f"{len(digests)} digests in one request")
    parts = urlsplit(url)
    deadline = time.monotonic() + options.timeout
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        conn = kind(parts.hostname or "", parts.port, timeout=options.timeout)
    except (ValueError, http.client.HTTPException) as e:
        raise PeerFailure(f"bad peer URL: {e}") from None
    payload = json.dumps(digests).encode()
    try:
        conn.request(
            "POST",
            parts.path.rstrip("/") + PATH,
            body=payload,
            headers={
                "Authorization": authorization(options.token, url, time.time()),
                "Content-Type": "application/json",
                "Accept": CONTENT_TYPE,
            },
        )
        response = conn.getresponse()
        if response.status != 200:
            raise PeerFailure(f"HTTP {response.status} {response.read(200)[:200]!r}")
        length = response.getheader("Content-Length")
        if length is not None and (not length.isdigit() or int(length) > bound):
            raise PeerFailure(f"a body of {length} bytes, over the {bound} the chunks asked for can take")
        # read straight into one buffer of the announced size (or the bound), the deadline checked between reads
        data = bytearray(int(length) if length is not None else bound + 1)
        view, at = memoryview(data), 0
        while at < len(data):
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerFailure(f"no whole answer within {options.timeout:g} s")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            n = response.readinto(view[at : at + _READ])
            if not n:
                break
            at += n
        if length is not None and at < len(data):
            raise PeerFailure(f"the answer is cut short ({at} of {length} bytes)")
        if length is None and at > bound:
            raise PeerFailure(f"a body over the {bound} bytes the chunks asked for can take")
        view.release()
        del data[at:]
        return data
    except PeerFailure:
        raise
    except TimeoutError:
        raise PeerFailure(f"no whole answer within {options.timeout:g} s") from None
    except (OSError, http.client.HTTPException) as e:
        raise PeerFailure(f"{type(e).__name__}: {e}") from None
    finally:
        conn.close()
