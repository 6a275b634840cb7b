"""Accepting a host's inventory report: who may send it, what it may name, and storing it (docs/placement.md).

Rules, in order (each refusal leaves the stored inventory as it was):

1. **Identity.** A host reports as itself: the token's name is the host's name, and the token holds a
   ``node`` scope (``admin`` implies one). Another name is 403 ``DENIED``; so is a token without one.
2. **Form.** ``reports.check_report`` (400 ``INVALID_REQUEST``, 413 ``TOO_LARGE``).
3. **Generation.** A delta names the generation the hub acknowledged last (``base``); any other is 409
   ``INVENTORY_STALE`` with the hub's generation, and the host sends a full report.
4. **Layers.** Every layer named (held whole or in part) must be a forkd snapshot layer of a
   repository the token may report on (``node`` scope pattern, or public). One that is not, unknown to
   the hub or unreadable alike, is 403 ``DENIED`` listing them (``detail.layers``): a host learns
   nothing about what it cannot read, and the agent drops them and reports again.
5. **Partial bitmaps** must have the bit count of the layer's files (``pull``: each chunk-mapped file of
   the layer; ``lazy``: the head's ``memory.bin``), else 400 ``INVALID_REQUEST``.
6. The result may hold at most ``FORKD_HUB_HOST_LAYERS`` layers (413 ``TOO_LARGE``).

The write bumps ``fleet_sequence`` in the same transaction, so every process's fleet index reloads the
host, and hosts silent for ten TTLs are deleted.

Errors: ``HubError`` as above; ``auth.errors.Forbidden``; ``auth.errors.Unauthorized`` (anonymous).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.errors import Forbidden, Unauthorized
from hub_server.auth.scopes import Principal
from hub_server.db.models import Manifest, Repository, RepositoryManifest
from hub_server.db.models_fleet import FleetHost, FleetHostLayer, FleetSequence
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.sql import batched, insert_ignore
from hub_server.registry.fleet.fleetindex import FleetIndex
from hub_server.registry.fleet.layerfacts import LayerFactsCache
from hub_server.registry.fleet.reports import Report, check_host_name, check_report
from manifest import mediatypes as mt

__all__ = ["InventoryService", "ReportAccepted", "readable_layers"]

#: Layers a refusal lists at most.
LISTED = 100
#: A host silent this many TTLs is deleted (placement already ignores it after one).
PURGE_AFTER_TTLS = 10


@dataclass(frozen=True)
class ReportAccepted:
    host: str
    generation: int
    layers: int
    partial: int
    expires_in: float


def may_report(principal: Principal, host: str) -> None:
    """Rule 1 of the module docstring. Raises Forbidden."""
    if principal.is_anonymous:
        raise Unauthorized(f"authentication required to report host {host}'s inventory (a node token)", "required")
    if not (principal.is_admin or any(s.action == "node" for s in principal.scopes)):
        raise Forbidden(
            f"token {principal.name!r} has no node scope: create a node token named like the host "
            "(forkd-hub token create HOST --scope 'node:NS/*')",
            "node",
            None,
        )
    if principal.name != host:
        raise Forbidden(
            f"token {principal.name!r} reports as host {principal.name!r} only, not {host!r}: a host's "
            "inventory is reported with the node token named like it",
            "node",
            None,
        )


async def readable_layers(session: AsyncSession, principal: Principal, digests: list[str]) -> set[str]:
    """Which of ``digests`` are forkd snapshot layers of a repository ``principal`` may report on or place in
    (a ``node`` or ``pull`` scope matching it, or a public one)."""
    readable: set[str] = set()
    for batch in batched(digests):
        rows = await session.exec(
            select(RepositoryManifest.manifest_digest, Repository, Manifest.artifact_type)
            .join(Repository, Repository.id == RepositoryManifest.repository_id)  # type: ignore[arg-type]
            .join(Manifest, Manifest.digest == RepositoryManifest.manifest_digest)  # type: ignore[arg-type]
            .where(col(RepositoryManifest.manifest_digest).in_(batch))
        )
        for digest, repo, artifact in rows.all():
            if artifact in mt.LAYER_ARTIFACTS and (
                repo.public or principal.can("node", repo.full_name) or principal.can("pull", repo.full_name)
            ):
                readable.add(digest)
    return readable


class InventoryService:
    """Stores inventory reports (module docstring); ``index`` is this process's fleet index."""

    def __init__(self, ctx: RegistryContext, facts: LayerFactsCache, index: FleetIndex) -> None:
        self.ctx = ctx
        self.facts = facts
        self.index = index

    async def report(self, principal: Principal, host: str, report: Report) -> ReportAccepted:
        """Check and store ``report`` as host ``host``'s inventory. Raises what the module docstring lists."""
        check_host_name(host)
        may_report(principal, host)
        limit = self.ctx.limits.host_layers
        check_report(report, limit)
        named = report.named_layers
        async with self.ctx.sessions() as session:
            row = await session.get(FleetHost, host)
            if report.mode == "delta" and (row is None or row.generation != report.base):
                generation = 0 if row is None else row.generation
                raise HubError(
                    ErrorCode.INVENTORY_STALE,
                    f"host {host}: the report builds on generation {report.base}, the hub holds {generation}; "
                    "send a full report",
                    {"host": host, "generation": generation},
                )
            readable = await readable_layers(session, principal, named)
        refused = [d for d in named if d not in readable]
        if refused:
            raise HubError(
                ErrorCode.DENIED,
                f"host {host} may not report {len(refused)} layer(s): unknown to this hub, not snapshot layers, "
                "or in repositories its token cannot read",
                {"layers": refused[:LISTED], "refused": len(refused)},
            )
        await self._check_partial(report)
        return await self._store(host, report, limit)

    async def _check_partial(self, report: Report) -> None:
        """Rule 5: every bitmap has its file's chunk count. Raises HubError(INVALID_REQUEST)."""
        facts = await self.facts.get_many(p.layer for p in report.partial)
        for i, part in enumerate(report.partial):
            layer = facts.get(part.layer)
            files = layer.files if layer is not None else {}
            for role, bitmap in part.files.items():
                entries = files.get(role)
                if entries is None or entries.count != bitmap.chunks:
                    expected = "no such file" if entries is None else f"{entries.count} chunks"
                    raise HubError(
                        ErrorCode.INVALID_REQUEST,
                        f"inventory report: partial[{i}].files.{role}: layer {part.layer} has {expected}, "
                        f"the bitmap {bitmap.chunks}",
                        {"field": f"partial[{i}].files.{role}.chunks"},
                    )

    async def _store(self, host: str, report: Report, limit: int) -> ReportAccepted:
        now = self.ctx.clock()
        async with self.ctx.sessions() as session:
            await session.exec(
                update(FleetSequence).where(col(FleetSequence.id) == 1).values(value=col(FleetSequence.value) + 1)
            )
            seq = (await session.exec(select(FleetSequence.value).where(FleetSequence.id == 1))).one()
            row = await session.get(FleetHost, host)
            if row is None:
                row = FleetHost(name=host, generation=0)
            elif report.mode == "delta" and row.generation != report.base:  # a concurrent report won
                raise HubError(
                    ErrorCode.INVENTORY_STALE,
                    f"host {host}: another report landed first (generation {row.generation}); send a full report",
                    {"host": host, "generation": row.generation},
                )
            if report.mode == "full":
                await session.exec(delete(FleetHostLayer).where(col(FleetHostLayer.host) == host))
                add = report.layers
            else:
                for batch in batched(report.remove):
                    await session.exec(
                        delete(FleetHostLayer).where(
                            col(FleetHostLayer.host) == host, col(FleetHostLayer.layer_digest).in_(batch)
                        )
                    )
                add = report.add
            row.generation += 1
            row.seq = seq
            row.reported_at = now
            row.facts = report.facts.to_json()
            row.partial = [p.to_json() for p in report.partial]
            session.add(row)
            await session.flush()
            await insert_ignore(session, FleetHostLayer, [{"host": host, "layer_digest": d} for d in add])
            held = (
                await session.exec(select(func.count()).select_from(FleetHostLayer).where(FleetHostLayer.host == host))
            ).one()
            if held > limit:
                await session.rollback()
                raise HubError(
                    ErrorCode.TOO_LARGE,
                    f"host {host} would hold {held} layers, over the {limit}-layer limit",
                    {"field": "add", "limit": limit},
                )
            generation = row.generation
            cutoff = now - timedelta(seconds=self.ctx.node_ttl * PURGE_AFTER_TTLS)
            purged = await session.exec(delete(FleetHost).where(col(FleetHost.reported_at) < cutoff))
            if purged.rowcount:  # every index reads all hosts again
                await session.exec(
                    update(FleetSequence).where(col(FleetSequence.id) == 1).values(purges=col(FleetSequence.purges) + 1)
                )
            await session.commit()
        self.index.invalidate()
        return ReportAccepted(host, generation, held, len(report.partial), self.ctx.node_ttl)
