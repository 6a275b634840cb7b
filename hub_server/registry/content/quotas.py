"""Namespace storage quotas: the unique bytes a namespace holds, and a push that would pass its quota refused.

**What a namespace is charged** (docs/limits.md "Storage quotas"): the bytes of the distinct blobs linked
to its repositories — configs, chunk maps, vmstates and data blobs (a forkd data blob holds only the
chunks its layer added). A blob linked to several repositories of one namespace (a shared base, a
mount, a retag) is charged once. A blob linked in two namespaces is charged to each: either alone keeps
it stored, and neither can see or delete the other's links. Untagged manifests count until deleted: they
are stored until GC collects them.

**The quota**: ``namespace_quotas.storage_bytes`` (``forkd-hub quota set``), else the hub's default
``FORKD_HUB_NAMESPACE_QUOTA``; none when both are unset (or the namespace's is ``UNLIMITED``).

**Where it is enforced**, with ``403 QUOTA_EXCEEDED`` (detail ``quota: storage``, ``limit``, ``used``,
``adding``, ``namespace``), before anything is stored:

- opening an upload session (or a monolithic upload) when the namespace is at or over its quota;
- finishing an upload whose blob is new to the namespace and would take it over;
- a manifest push whose links (the chain's blobs, mounted from elsewhere) would take it over. A push that
  adds nothing new is always accepted, so a namespace over a lowered quota can still move tags.

Counts are read in the writer's transaction; concurrent writers may each pass a nearly full quota once.
The usage query reads the namespace's links: O(blobs linked to the namespace) rows, one aggregate.

Errors: ``HubError(QUOTA_EXCEEDED)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import Blob, Repository, RepositoryBlob
from hub_server.db.models_limits import UNLIMITED, NamespaceQuota
from hub_server.db.types import utcnow
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext

__all__ = [
    "QuotaService",
    "QuotaStatus",
    "check_links",
    "check_storage",
    "namespace_usage",
    "storage_quota",
    "usage_if_limited",
]

Source = Literal["namespace", "hub default", "none"]


@dataclass(frozen=True)
class QuotaStatus:
    """A namespace's storage quota (``limit`` None: unlimited), where it comes from, and what it uses."""

    namespace: str
    limit: int | None
    used: int
    source: Source

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "quotaBytes": self.limit, "usedBytes": self.used, "source": self.source}


def _linked(namespace: str) -> Any:
    return (
        select(RepositoryBlob.blob_digest)
        .join(Repository, col(Repository.id) == col(RepositoryBlob.repository_id))
        .where(col(Repository.namespace) == namespace)
    )


async def namespace_usage(session: AsyncSession, namespace: str) -> int:
    """The bytes of the distinct blobs linked to ``namespace``'s repositories."""
    total = (
        await session.exec(
            select(func.coalesce(func.sum(Blob.size), 0)).where(col(Blob.digest).in_(_linked(namespace)))
        )
    ).one()
    return int(total)


async def storage_quota(session: AsyncSession, ctx: RegistryContext, namespace: str) -> tuple[int | None, Source]:
    """The namespace's storage quota in bytes (None: unlimited) and where it comes from."""
    row = await session.get(NamespaceQuota, namespace)
    if row is not None and row.storage_bytes is not None:
        return (None, "namespace") if row.storage_bytes == UNLIMITED else (row.storage_bytes, "namespace")
    if ctx.namespace_quota is not None:
        return ctx.namespace_quota, "hub default"
    return None, "none"


def _over(namespace: str, limit: int, used: int, adding: int) -> HubError:
    return HubError(
        ErrorCode.QUOTA_EXCEEDED,
        f"storage: namespace {namespace!r} uses {used} of its {limit} bytes; this write would add {adding} "
        "(delete tags and run GC, or ask for a larger quota: forkd-hub quota set)",
        {"quota": "storage", "limit": limit, "used": used, "adding": adding, "namespace": namespace},
    )


async def check_storage(
    session: AsyncSession, ctx: RegistryContext, namespace: str, *, adding: int = 0, blob: str | None = None
) -> None:
    """Raise HubError(QUOTA_EXCEEDED) when ``namespace`` is at its quota (``adding`` 0) or adding ``adding``
    bytes would pass it; ``blob``: the digest being added, charged nothing if the namespace holds it already."""
    limit, _ = await storage_quota(session, ctx, namespace)
    if limit is None:
        return
    if blob is not None and adding:
        held = (
            await session.exec(
                select(func.count())
                .where(col(RepositoryBlob.blob_digest) == blob)
                .where(
                    col(RepositoryBlob.repository_id).in_(
                        select(Repository.id).where(col(Repository.namespace) == namespace)
                    )
                )
            )
        ).one()
        if held:
            return
    used = await namespace_usage(session, namespace)
    if used + adding > limit or (adding == 0 and used >= limit):
        raise _over(namespace, limit, used, adding)


async def usage_if_limited(session: AsyncSession, ctx: RegistryContext, namespace: str) -> int | None:
    """The namespace's usage when it has a storage quota, else None (nothing to check, nothing read)."""
    limit, _ = await storage_quota(session, ctx, namespace)
    return None if limit is None else await namespace_usage(session, namespace)


async def check_links(session: AsyncSession, ctx: RegistryContext, namespace: str, before: int) -> None:
    """After a push linked its rows (flushed, not committed): raise HubError(QUOTA_EXCEEDED) when they took
    ``namespace`` from ``before`` bytes to more than its quota. A push adding nothing passes."""
    limit, _ = await storage_quota(session, ctx, namespace)
    if limit is None:
        return
    await session.flush()
    after = await namespace_usage(session, namespace)
    if after > before and after > limit:
        raise _over(namespace, limit, before, after - before)


class QuotaService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def status(self, namespace: str) -> QuotaStatus:
        async with self.ctx.sessions() as session:
            limit, source = await storage_quota(session, self.ctx, namespace)
            used = await namespace_usage(session, namespace)
        return QuotaStatus(namespace, limit, used, source)

    async def set(self, namespace: str, storage_bytes: int | None) -> QuotaStatus:
        """Set ``namespace``'s quota: bytes, ``UNLIMITED``, or None (the hub default)."""
        async with self.ctx.sessions() as session:
            row = await session.get(NamespaceQuota, namespace)
            if row is None:
                row = NamespaceQuota(namespace=namespace)
            row.storage_bytes = storage_bytes
            row.updated_at = utcnow()
            session.add(row)
            await session.commit()
        return await self.status(namespace)
