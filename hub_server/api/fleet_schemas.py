"""Wire schemas of the fleet routes (``api/fleet.py``; docs/placement.md): msgspec structs, camelCase on the
wire, each turned into (``to_*``) or built from (``from_*``) the registry's fleet types."""

from __future__ import annotations

from typing import Literal

import msgspec

from hub_server.registry.fleet.hostcheck import Constraints
from hub_server.registry.fleet.inventory import ReportAccepted
from hub_server.registry.fleet.peers import Peer, PeerAnswer
from hub_server.registry.fleet.placement import Placement, PlacementRequest
from hub_server.registry.fleet.ranking import LinkMissing
from hub_server.registry.fleet.reports import FileBitmap, HostFacts, PartialLayer, Report, VmmFacts

__all__ = ["InventoryAcceptedOut", "InventoryReportIn", "PeersIn", "PeersOut", "PlacementIn", "PlacementOut"]


class _Wire(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    pass


class VmmFactsIn(_Wire):
    vmm: str
    vmm_version: str
    machine: str
    accel: str
    arch: str
    cpu: str


class HostFactsIn(_Wire):
    free_disk: int | None = None
    free_memory: int | None = None
    arch: str | None = None
    cpus: int | None = None
    load: float | None = None
    vmms: list[VmmFactsIn] = []
    labels: dict[str, str] = {}
    download_rate: int | None = None
    peer_url: str | None = None

    def to_facts(self) -> HostFacts:
        return HostFacts(
            free_disk=self.free_disk,
            free_memory=self.free_memory,
            arch=self.arch,
            cpus=self.cpus,
            load=self.load,
            vmms=tuple(VmmFacts(v.vmm, v.vmm_version, v.machine, v.accel, v.arch, v.cpu) for v in self.vmms),
            labels=dict(self.labels),
            download_rate=self.download_rate,
            peer_url=self.peer_url,
        )


class FileBitmapIn(_Wire):
    chunks: int
    present: str


class PartialLayerIn(_Wire):
    layer: str
    kind: Literal["pull", "lazy"]
    files: dict[str, FileBitmapIn]


class InventoryReportIn(_Wire):
    mode: Literal["full", "delta"]
    base: int | None = None
    layers: list[str] = []
    add: list[str] = []
    remove: list[str] = []
    partial: list[PartialLayerIn] = []
    facts: HostFactsIn = msgspec.field(default_factory=HostFactsIn)

    def to_report(self) -> Report:
        return Report(
            mode=self.mode,
            facts=self.facts.to_facts(),
            layers=tuple(self.layers),
            add=tuple(self.add),
            remove=tuple(self.remove),
            base=self.base,
            partial=tuple(
                PartialLayer(p.layer, p.kind, {role: FileBitmap(f.chunks, f.present) for role, f in p.files.items()})
                for p in self.partial
            ),
        )


class InventoryAcceptedOut(_Wire):
    host: str
    generation: int
    layers: int
    partial: int
    expires_in: float

    @classmethod
    def from_accepted(cls, a: ReportAccepted) -> InventoryAcceptedOut:
        return cls(host=a.host, generation=a.generation, layers=a.layers, partial=a.partial, expires_in=a.expires_in)


class ConstraintsIn(_Wire):
    min_free_memory: int | None = None
    min_free_disk: int | None = None
    arch: str | None = None
    vmm: str | None = None
    labels: dict[str, str] = {}


class PlacementIn(_Wire):
    reference: str
    hosts: list[str] | None = None
    selector: dict[str, str] = {}
    constraints: ConstraintsIn = msgspec.field(default_factory=ConstraintsIn)
    limit: int | None = None

    def to_request(self) -> PlacementRequest:
        c = self.constraints
        return PlacementRequest(
            self.reference,
            hosts=None if self.hosts is None else tuple(self.hosts),
            selector=dict(self.selector),
            constraints=Constraints(c.min_free_memory, c.min_free_disk, c.arch, c.vmm, dict(c.labels)),
            limit=self.limit,
        )


class LinkMissingOut(_Wire):
    digest: str
    missing_bytes: int
    chunks: int
    held: bool


class RankedHostOut(_Wire):
    host: str
    rank: int
    missing_bytes: int
    missing_chunks: int
    links: list[LinkMissingOut]
    estimated_seconds: float | None
    download_rate: int | None
    free_memory: int | None
    free_disk: int | None
    load: float | None
    labels: dict[str, str]
    reported_at: str


class ExcludedHostOut(_Wire):
    host: str
    kind: str
    reason: str


class ChainLinkBytesOut(_Wire):
    digest: str
    bytes: int


class PlacementOut(_Wire):
    reference: str
    repository: str
    digest: str
    total_bytes: int
    chain: list[ChainLinkBytesOut]
    ranked: list[RankedHostOut]
    excluded: list[ExcludedHostOut]
    tie_break: str

    @classmethod
    def from_placement(cls, p: Placement) -> PlacementOut:
        shared: dict[int, list[LinkMissingOut]] = {}  # hosts with the same mask share one list

        def links(items: tuple[LinkMissing, ...]) -> list[LinkMissingOut]:
            found = shared.get(id(items))
            if found is None:
                found = shared[id(items)] = [
                    LinkMissingOut(digest=x.digest, missing_bytes=x.missing_bytes, chunks=x.chunks, held=x.held)
                    for x in items
                ]
            return found

        return cls(
            reference=p.reference,
            repository=p.repository,
            digest=p.digest,
            total_bytes=p.total,
            chain=[ChainLinkBytesOut(digest=d, bytes=n) for d, n in p.links],
            ranked=[
                RankedHostOut(
                    host=r.host,
                    rank=r.rank,
                    missing_bytes=r.missing.total,
                    missing_chunks=r.missing.chunks,
                    links=links(r.missing.links),
                    estimated_seconds=None if r.estimated_seconds is None else round(r.estimated_seconds, 3),
                    download_rate=r.facts.download_rate,
                    free_memory=r.facts.free_memory,
                    free_disk=r.facts.free_disk,
                    load=r.facts.load,
                    labels=r.facts.labels,
                    reported_at=r.reported_at.isoformat(),
                )
                for r in p.ranked
            ],
            excluded=[ExcludedHostOut(host=e.host, kind=e.kind, reason=e.reason) for e in p.excluded],
            tie_break=p.tie_break,
        )


class PeersIn(_Wire):
    layers: list[str]
    host: str | None = None
    pulling: bool = False
    window: float | None = None


class PeerOut(_Wire):
    host: str
    url: str


class PeersOut(_Wire):
    peers: dict[str, list[PeerOut]]
    swarm: dict[str, list[PeerOut]]

    @classmethod
    def from_answer(cls, answer: PeerAnswer) -> PeersOut:
        def wire(by_layer: dict[str, list[Peer]]) -> dict[str, list[PeerOut]]:
            return {layer: [PeerOut(host=p.host, url=p.url) for p in found] for layer, found in by_layer.items()}

        return cls(peers=wire(answer.holders), swarm=wire(answer.swarm))
