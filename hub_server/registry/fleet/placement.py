"""Placement: the hosts of the fleet ranked by what they miss of a chain (docs/placement.md, "API").

:meth:`PlacementService.place` resolves the reference in its repository for the caller (``place``
access: ``pull``, or ``node`` on that repository; refused like a read otherwise), reads the chain's
layer facts, brings the fleet index up to date, and ranks the candidate hosts (the named ones, else
every host matching the label selector) with :class:`~.ranking.ChainUniverse`:

- hosts that cannot take it are **excluded** with a reason: ``unknown`` (never reported),
  ``expired`` (silent longer than ``FORKD_HUB_NODE_TTL``), ``compat``, ``constraint``, ``capacity``
  (``hostcheck.py``);
- the others are **ranked** by missing bytes, then more free memory, then less load, then name (a
  fact not reported sorts last), each with its missing bytes per link and, when the host reported
  its download rate, the estimated transfer time.

Universes are kept per head (least recently used first out), so a placement of a chain seen before
costs O(hosts holding its relevant layers + hosts) (``ranking.py``).

Errors: ``HubError`` (``NAME_INVALID``, ``NAME_UNKNOWN``, ``MANIFEST_UNKNOWN``, ``UNSUPPORTED`` for a
manifest that is not a forkd snapshot layer); ``auth.errors.Unauthorized`` / ``Forbidden``.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope, resolve_scope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_tag
from hub_server.registry.fleet.fleetindex import FleetIndex, HostInventory
from hub_server.registry.fleet.hostcheck import Constraints, capacity_refusal, compat_refusal, constraint_refusal
from hub_server.registry.fleet.layerfacts import LayerFacts, LayerFactsCache
from hub_server.registry.fleet.ranking import ChainUniverse, Missing
from hub_server.registry.fleet.reports import HostFacts
from hub_server.registry.read.lineage import resolve_layers

__all__ = [
    "ExcludedHost",
    "Placement",
    "PlacementRequest",
    "PlacementService",
    "RankedHost",
    "rank_hosts",
    "split_reference",
]

#: Chain universes kept per process (a 16 GiB base's is tens of MB).
UNIVERSES = 16
TIE_BREAK = "missing bytes, then free memory (more first), then load (less first), then host name"


@dataclass(frozen=True)
class PlacementRequest:
    """What to place where: ``reference`` (``ns/repo[:tag]`` or ``ns/repo@digest``), the candidate
    ``hosts`` (None: every host matching ``selector``), the ``constraints``, and how many ranked hosts to list."""

    reference: str
    hosts: tuple[str, ...] | None = None
    selector: dict[str, str] = field(default_factory=dict)
    constraints: Constraints = field(default_factory=Constraints)
    limit: int | None = None


@dataclass(frozen=True)
class RankedHost:
    host: str
    rank: int
    missing: Missing
    estimated_seconds: float | None
    facts: HostFacts
    reported_at: datetime


@dataclass(frozen=True)
class ExcludedHost:
    host: str
    kind: str
    reason: str


@dataclass(frozen=True)
class Placement:
    reference: str
    repository: str
    digest: str
    links: tuple[tuple[str, int], ...]
    """Each link base first: (digest, the bytes a host holding nothing moves for it)."""
    total: int
    ranked: tuple[RankedHost, ...]
    excluded: tuple[ExcludedHost, ...]
    tie_break: str = TIE_BREAK


def split_reference(reference: str) -> tuple[str, str, str]:
    """``ns/repo[:tag]`` or ``ns/repo@digest`` → (namespace, name, tag or digest; tag ``latest`` by default).

    Raises HubError(NAME_INVALID)."""
    name, at, digest = reference.partition("@")
    tag = "latest"
    if not at:
        colon = name.rfind(":")
        if colon > name.rfind("/"):
            name, tag = name[:colon], check_tag(name[colon + 1 :])
    namespace, sep, repo = name.partition("/")
    if not sep or not namespace or not repo or "/" in repo:
        raise HubError(
            ErrorCode.NAME_INVALID,
            f"reference {reference[:200]!r}: expected NAMESPACE/REPO[:TAG] or NAMESPACE/REPO@DIGEST",
            {"name": reference[:200]},
        )
    return namespace, repo, digest if at else tag


class PlacementService:
    """Ranks hosts for a chain (module docstring). ``facts`` and ``index`` are shared with the inventory."""

    def __init__(self, ctx: RegistryContext, facts: LayerFactsCache, index: FleetIndex) -> None:
        self.ctx = ctx
        self.facts = facts
        self.index = index
        self._universes: OrderedDict[str, tuple[ChainUniverse, int]] = OrderedDict()

    async def scope(self, principal: Principal, reference: str) -> tuple[RepositoryScope, str]:
        """The repository ``reference`` names, as ``principal`` may place from it, and the tag or digest.
        Raises: as :func:`~hub_server.registry.core.access.resolve_scope`, HubError(NAME_INVALID)."""
        namespace, name, ref = split_reference(reference)
        return await resolve_scope(self.ctx, principal, namespace, name, "place"), ref

    async def place(self, principal: Principal, request: PlacementRequest) -> Placement:
        """Rank the fleet's hosts for ``request`` (module docstring). Raises what the module docstring lists."""
        scope, ref = await self.scope(principal, request.reference)
        universe = await self.universe(scope, ref)
        await self.index.refresh()
        await self._examine(universe)
        ranked, excluded = rank_hosts(
            universe, self.index, request, self.ctx.clock(), self.ctx.node_ttl, universe.facts[-1].compat
        )
        return Placement(
            request.reference,
            scope.full_name,
            universe.head,
            tuple((d, universe.owned[i] + universe.vmstate[i]) for i, d in enumerate(universe.links)),
            universe.total,
            ranked,
            excluded,
        )

    async def universe(self, scope: RepositoryScope, ref: str) -> ChainUniverse:
        """The chain ``ref`` names in ``scope``'s repository, as a universe (cached per head).
        Raises HubError(MANIFEST_UNKNOWN / UNSUPPORTED)."""
        async with self.ctx.sessions() as session:
            _, rows = await resolve_layers(session, scope, ref)
        head = rows[-1].digest
        cached = self._universes.get(head)
        if cached is not None:
            self._universes.move_to_end(head)
            return cached[0]
        facts = await self.facts.get_many(row.digest for row in rows)
        links: list[LayerFacts] = []
        for row in rows:
            if row.digest not in facts:
                raise HubError(
                    ErrorCode.UNSUPPORTED,
                    f"{row.digest} is not a forkd snapshot layer: only snapshot chains are placed",
                    {"digest": row.digest},
                )
            links.append(facts[row.digest])
        universe = ChainUniverse(links)
        self._universes[head] = (universe, -1)
        while len(self._universes) > UNIVERSES:
            self._universes.popitem(last=False)
        return universe

    async def _examine(self, universe: ChainUniverse) -> None:
        """Give the universe the fleet layers it has not checked for shared chunks (once per new layer)."""
        cached = self._universes.get(universe.head)
        if cached is not None and cached[1] == self.index.layers_version:
            return
        new = universe.unexamined(self.index.holders)
        if new:
            universe.examine(await self.facts.get_many(new))
            universe.examine(dict.fromkeys(new, _NO_FRAMES))  # not snapshot layers (or gone): never again
        if universe.head in self._universes:
            self._universes[universe.head] = (universe, self.index.layers_version)


#: What a fleet layer the hub cannot read facts of contributes: nothing.
_NO_FRAMES = LayerFacts("", None, 0, {})
_NO_CONSTRAINTS = Constraints()


def rank_hosts(
    universe: ChainUniverse,
    index: FleetIndex,
    request: PlacementRequest,
    now: datetime,
    ttl: float,
    compat: dict[str, object],
) -> tuple[tuple[RankedHost, ...], tuple[ExcludedHost, ...]]:
    """Rank the candidate hosts of ``index`` for ``universe`` (the module docstring's rules)."""
    hosts = index.hosts
    excluded: list[ExcludedHost] = []
    if request.hosts is not None:
        candidates: list[HostInventory] = []
        for name in dict.fromkeys(request.hosts):
            host = hosts.get(name)
            if host is None:
                excluded.append(ExcludedHost(name, "unknown", "no inventory: this host never reported"))
            else:
                candidates.append(host)
    else:
        candidates = list(hosts.values())
    if request.selector:
        wanted = request.selector.items()
        candidates = [h for h in candidates if all(h.facts.labels.get(k) == v for k, v in wanted)]
    masks = universe.masks(index.holders)
    cutoff = now - timedelta(seconds=ttl)
    constrained = request.constraints != _NO_CONSTRAINTS
    compat_seen = universe.compat_seen
    scored: list[tuple[tuple[int, int, float, str], HostInventory, Missing]] = []
    for host in candidates:
        if host.reported_at < cutoff:
            age = (now - host.reported_at).total_seconds()
            excluded.append(
                ExcludedHost(host.name, "expired", f"last reported {age:,.0f} s ago, over the {ttl:,.0f} s TTL")
            )
            continue
        seen = compat_seen.get(host.name)  # a host's facts change only when it reports
        if seen is not None and seen[0] is host.facts and seen[1] is compat:
            refusal = seen[2]
        else:
            refusal = compat_refusal(host.facts, compat)
            compat_seen[host.name] = (host.facts, compat, refusal)
        if refusal is not None:
            excluded.append(ExcludedHost(host.name, "compat", refusal))
            continue
        refusal = constraint_refusal(host.facts, request.constraints) if constrained else None
        if refusal is not None:
            excluded.append(ExcludedHost(host.name, "constraint", refusal))
            continue
        missing = universe.missing_for(host, masks.get(host.name, 0))
        refusal = capacity_refusal(host.facts, missing.chunks, universe.chunk_size)
        if refusal is not None:
            excluded.append(ExcludedHost(host.name, "capacity", refusal))
            continue
        facts = host.facts
        key = (
            missing.total,
            -(facts.free_memory if facts.free_memory is not None else -1),
            facts.load if facts.load is not None else math.inf,
            host.name,
        )
        scored.append((key, host, missing))
    if request.limit is not None:
        scored = heapq.nsmallest(request.limit, scored, key=lambda item: item[0])
    else:
        scored.sort(key=lambda item: item[0])
    ranked = tuple(
        RankedHost(
            host.name,
            rank,
            missing,
            missing.total / host.facts.download_rate if host.facts.download_rate else None,
            host.facts,
            host.reported_at,
        )
        for rank, (_, host, missing) in enumerate(scored, start=1)
    )
    excluded.sort(key=lambda e: e.host)
    return ranked, tuple(excluded)
