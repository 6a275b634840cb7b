"""Every host's inventory in memory, in the form placement reads cheaply (docs/placement.md, "Cost").

Per host: its facts, the set of layers it holds whole, its partial layers (bitmaps decoded once), and
when it last reported; across hosts, **holders**: layer digest → the hosts holding it whole, so a
placement visits only the hosts holding a layer that matters to its chain.

The database is the truth (replicas and workers share it); each process keeps its index and reloads
only the hosts whose report ``seq`` is past the last one it read (``fleet_sequence`` hands them out in
commit order, so nothing is skipped). A reload happens at most every ``max_age`` seconds (the hub's
``FORKD_HUB_CACHE_TTL``), and at once after this process accepted a report (:meth:`FleetIndex.invalidate`).
When hosts were purged since (``fleet_sequence.purges`` moved) the index is read again whole. Hosts past
the TTL stay (until purged) and are reported as expired by placement.

Errors: SQLAlchemy's on a database failure (the API maps them to 503).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import col, select

from hub_server.db.models_fleet import FleetHost, FleetHostLayer, FleetSequence
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.sql import batched
from hub_server.registry.fleet.reports import HostFacts, PartialLayer

__all__ = ["FleetIndex", "HostInventory"]


@dataclass
class HostInventory:
    """One host as the index holds it."""

    name: str
    generation: int
    seq: int
    reported_at: datetime
    facts: HostFacts
    layers: frozenset[str]
    partial: tuple[PartialLayer, ...] = ()
    bits: dict[tuple[str, str, str], bytes] = field(default_factory=dict)  # keys: (layer, kind, role)
    """(layer, kind, role) → the raw bitmap, decoded once."""

    def bitmap(self, layer: str, kind: str, role: str) -> bytes | None:
        return self.bits.get((layer, kind, role))

    @classmethod
    def build(
        cls,
        name: str,
        generation: int,
        seq: int,
        reported_at: datetime,
        facts: HostFacts,
        layers: frozenset[str],
        partial: tuple[PartialLayer, ...] = (),
    ) -> HostInventory:
        """A host with its partial bitmaps decoded (they were checked when reported)."""
        bits: dict[tuple[str, str, str], bytes] = {
            (p.layer, str(p.kind), role): f.bits() for p in partial for role, f in p.files.items()
        }
        return cls(name, generation, seq, reported_at, facts, layers, partial, bits)


class FleetIndex:
    """The hosts and who holds what (module docstring). ``hosts`` and ``holders`` are read by placement."""

    def __init__(
        self, ctx: RegistryContext | None, *, max_age: float = 2.0, clock: Callable[[], float] = time.monotonic
    ):
        self.ctx = ctx
        self.max_age = max_age
        self._clock = clock
        self.hosts: dict[str, HostInventory] = {}
        self.holders: dict[str, set[str]] = {}
        self.layers_version = 0
        """Bumped whenever a layer no host held before appears (placement's chain caches look again)."""
        self._seq = -1
        self._purges = -1  # not read yet: the first refresh reads every host
        self._read_at: float | None = None

    def invalidate(self) -> None:
        """Read the database at the next :meth:`refresh` (this process just accepted a report)."""
        self._read_at = None

    def put(self, host: HostInventory) -> None:
        """Replace (or add) a host's inventory, keeping ``holders`` in step."""
        old = self.hosts.get(host.name)
        if old is not None:
            for layer in old.layers - host.layers:
                holders = self.holders.get(layer)
                if holders is not None:
                    holders.discard(host.name)
                    if not holders:
                        del self.holders[layer]
        for layer in host.layers if old is None else host.layers - old.layers:
            holders = self.holders.get(layer)
            if holders is None:
                holders = self.holders[layer] = set()
                self.layers_version += 1
            holders.add(host.name)
        self.hosts[host.name] = host

    def drop(self, name: str) -> None:
        old = self.hosts.pop(name, None)
        if old is None:
            return
        for layer in old.layers:
            holders = self.holders.get(layer)
            if holders is not None:
                holders.discard(name)
                if not holders:
                    del self.holders[layer]

    async def refresh(self) -> None:
        """Bring the index up to the database when it is older than ``max_age`` (module docstring)."""
        now = self._clock()
        if self.ctx is None or (self._read_at is not None and now - self._read_at < self.max_age):
            return
        async with self.ctx.sessions() as session:
            _, purges = (await session.exec(select(FleetSequence.value, FleetSequence.purges))).one()
            whole = purges != self._purges
            query = select(FleetHost) if whole else select(FleetHost).where(col(FleetHost.seq) > self._seq)
            rows = (await session.exec(query)).all()
            layers: dict[str, set[str]] = {row.name: set() for row in rows}
            for batch in batched(list(layers)):
                found = await session.exec(
                    select(FleetHostLayer.host, FleetHostLayer.layer_digest).where(col(FleetHostLayer.host).in_(batch))
                )
                for host, digest in found.all():
                    layers[host].add(digest)
        if whole:
            for name in set(self.hosts) - set(layers):
                self.drop(name)
        for row in rows:
            partial = tuple(PartialLayer.from_json(p) for p in row.partial or [])
            self.put(
                HostInventory.build(
                    row.name,
                    row.generation,
                    row.seq,
                    row.reported_at,
                    HostFacts.from_json(row.facts),
                    frozenset(layers[row.name]),
                    partial,
                )
            )
            self._seq = max(self._seq, row.seq)
        self._purges = purges
        self._read_at = now
