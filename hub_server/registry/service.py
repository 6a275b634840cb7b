"""``Registry``: one instance of every registry service, built from a :class:`RegistryContext`.

The app keeps one on ``app.state.registry``; the HTTP layer resolves the request's repository
once (:meth:`Registry.scope`) and calls exactly one method of one service with it. The CLI builds
one for ``gc``, ``verify`` and ``repo``.
"""

from __future__ import annotations

import time

from sqlalchemy import func, text
from sqlmodel import select

from hub_server.auth.errors import AuthError
from hub_server.auth.scopes import Principal
from hub_server.db.models import Repository
from hub_server.errors import HubError
from hub_server.registry.content.blobs import BlobService, BlobUnlinker
from hub_server.registry.content.tags import TagService
from hub_server.registry.core.access import Access, RepositoryScope, resolve_scope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_repository
from hub_server.registry.core.paths import HEALTH_PROBE_KEY
from hub_server.registry.push.chunks import ChunkService
from hub_server.registry.push.manifests import ManifestService
from hub_server.registry.push.uploads import UploadService
from hub_server.registry.read.auditview import AuditView
from hub_server.registry.read.browse import BrowseService
from hub_server.registry.read.catalog import CatalogService
from hub_server.registry.read.lineage import LineageService
from hub_server.registry.read.manifests import ManifestReader
from hub_server.registry.read.referrers import ReferrerService
from hub_server.registry.upkeep.deletion import DeleteService
from hub_server.registry.upkeep.gc import GarbageCollector
from hub_server.registry.upkeep.usage import stored_bytes

__all__ = ["HealthReport", "Registry"]

HealthReport = dict[str, str]
#: Seconds a storage-usage measurement is reused for ``/metrics``.
GAUGE_MAX_AGE = 15.0


class Registry:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx
        self.uploads = UploadService(ctx)
        self.blobs = BlobService(ctx)
        self.blob_links = BlobUnlinker(ctx)
        self.manifests = ManifestService(ctx)
        self.manifest_reads = ManifestReader(ctx)
        self.referrers = ReferrerService(ctx)
        self.tags = TagService(ctx)
        self.chunks = ChunkService(ctx)
        self.lineage = LineageService(ctx)
        self.catalog = CatalogService(ctx)
        self.browse = BrowseService(ctx)
        self.audit_view = AuditView(ctx)
        self.deletion = DeleteService(ctx)
        self.gc = GarbageCollector(ctx)
        self._gauges_at: float | None = None

    async def scope(
        self, principal: Principal, namespace: str, name: str, access: Access, *, cached: bool = False
    ) -> RepositoryScope:
        """The repository ``namespace/name`` as ``principal`` may ``access`` it: resolved and authorized
        once per request (``core/access.py``), then handed to a service. Raises: as :func:`resolve_scope`."""
        return await resolve_scope(self.ctx, principal, namespace, name, access, cached=cached)

    async def rights(self, principal: Principal, namespace: str, name: str) -> dict[str, bool]:
        """What ``principal`` may do to ``namespace/name`` (``pull``, ``push``, ``delete``; ``pullScope``: whether
        its scopes name a pull there, so a 404 can say "or your token lacks pull scope"), by the rules every
        route applies, without doing it (``GET /api/v1/me?repository=``: a push checks this before it builds
        anything). Raises HubError(NAME_INVALID)."""
        check_repository(namespace, name)
        full = f"{namespace}/{name}"
        try:
            await self.scope(principal, namespace, name, "pull")
            pull = True
        except (HubError, AuthError):
            pull = False
        return {
            "pull": pull,
            "pullScope": principal.can("pull", full),
            "push": principal.can("push", full),
            "delete": principal.can("delete", full),
        }

    async def health(self) -> tuple[bool, HealthReport]:
        """Whether the database and the blob store answer (and the store has room: ``min_free_bytes``);
        per component ``"ok"`` or the error. Replicas behind a load balancer use it as readiness."""
        report: HealthReport = {}
        try:
            async with self.ctx.sessions() as session:
                await session.exec(select(text("1")))
            report["database"] = "ok"
        except Exception as e:  # noqa: BLE001 - any failure means "not healthy", reported as text
            report["database"] = f"error: {type(e).__name__}: {e}"[:300]
        try:
            await self.ctx.store.exists(HEALTH_PROBE_KEY)
            free = await self.ctx.store.free_bytes()
            minimum = self.ctx.limits.min_free_bytes
            report["storage"] = (
                "ok"
                if free is None or free >= minimum
                else (f"error: full: {free} bytes free, under the {minimum}-byte minimum")
            )
        except Exception as e:  # noqa: BLE001
            report["storage"] = f"error: {type(e).__name__}: {e}"[:300]
        return all(v == "ok" for v in report.values()), report

    async def refresh_gauges(self, max_age: float = GAUGE_MAX_AGE) -> None:
        """Update the storage and repository gauges (before ``/metrics`` renders), at most every ``max_age`` s.

        Storage is read from the database (registry/upkeep/usage.py: no walk of the store, cheap on S3);
        scrapes in quick succession still reuse the last values.
        """
        now = time.monotonic()
        if self._gauges_at is not None and now - self._gauges_at < max_age:
            return
        self._gauges_at = now
        self.ctx.metrics.storage_used_bytes.set(await stored_bytes(self.ctx))
        async with self.ctx.sessions() as session:
            rows = (await session.exec(select(Repository.public, func.count()).group_by(Repository.public))).all()
        counts = {bool(public): n for public, n in rows}
        self.ctx.metrics.repositories.labels(visibility="public").set(counts.get(True, 0))
        self.ctx.metrics.repositories.labels(visibility="private").set(counts.get(False, 0))
