"""``Registry``: one instance of every registry service, built from a :class:`RegistryContext`.

The app keeps one on ``app.state.registry``; the HTTP layer resolves the request's repository
once (:meth:`Registry.scope`) and calls exactly one method of one service with it. The CLI builds
one for ``gc``, ``verify`` and ``repo``.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import func, text
from sqlmodel import select

from hub_server.auth.errors import AuthError
from hub_server.auth.scopes import Principal
from hub_server.db.models import Repository, Upload
from hub_server.errors import HubError
from hub_server.outages import DATABASE, STORAGE
from hub_server.registry.content.blobs import BlobService, BlobUnlinker
from hub_server.registry.content.quotas import QuotaService
from hub_server.registry.content.tags import TagService
from hub_server.registry.core.access import Access, RepositoryScope, resolve_scope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_repository
from hub_server.registry.core.paths import HEALTH_PROBE_KEY, HEALTH_WRITE_KEY
from hub_server.registry.fleet.fleetindex import FleetIndex
from hub_server.registry.fleet.inventory import InventoryService
from hub_server.registry.fleet.kube import KubeExtender
from hub_server.registry.fleet.layerfacts import LayerFactsCache
from hub_server.registry.fleet.peers import PeerDirectory
from hub_server.registry.fleet.placement import PlacementService
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
#: Seconds the outcome of ``/healthz``'s write probe is reused: a load balancer asks every few seconds, and
#: each replica then writes at most one small object per interval.
HEALTH_WRITE_EVERY = 5.0
#: Seconds ``/healthz`` waits for its write probe: a store that does not answer is reported as failing writes,
#: well inside a load balancer's check timeout (HAProxy's ``timeout check`` in deploy/haproxy.cfg).
HEALTH_WRITE_TIMEOUT = 5.0


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
        self.quotas = QuotaService(ctx)
        self.browse = BrowseService(ctx)
        self.audit_view = AuditView(ctx)
        self.deletion = DeleteService(ctx)
        self.gc = GarbageCollector(ctx)
        layer_facts = LayerFactsCache(ctx)
        fleet = FleetIndex(ctx, max_age=ctx.cache.ttl)
        self.inventory = InventoryService(ctx, layer_facts, fleet)
        self.placement = PlacementService(ctx, layer_facts, fleet)
        self.kube = KubeExtender(self.placement)
        self.peers = PeerDirectory(ctx, fleet)
        self._gauges_at: float | None = None
        self._write_probe: tuple[float, str | None] | None = None
        self._write_probe_lock = asyncio.Lock()

    async def scope(
        self,
        principal: Principal,
        namespace: str,
        name: str,
        access: Access,
        *,
        cached: bool = False,
        also: str | None = None,
    ) -> RepositoryScope:
        """The repository ``namespace/name`` as ``principal`` may ``access`` it: resolved and authorized
        once per request (``core/access.py``), then handed to a service (``also``: another scope a refusal
        names). Raises: as :func:`resolve_scope`."""
        return await resolve_scope(self.ctx, principal, namespace, name, access, cached=cached, also=also)

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
        """Whether the database and the blob store answer, the store accepts writes and has room
        (``min_free_bytes``, where it can tell); per component ``"ok"`` or ``"error: …"`` naming the failure.
        Replicas behind a load balancer use it as readiness; what it sees is reported to ``ctx.outages``."""
        report: HealthReport = {}
        try:
            async with self.ctx.sessions() as session:
                await session.exec(select(text("1")))
            report["database"] = "ok"
        except Exception as e:  # noqa: BLE001 - any failure means "not healthy", reported as text
            report["database"] = f"error: {getattr(e, 'reason', None) or f'{type(e).__name__}: {e}'}"[:300]
        report["storage"] = await self._storage_health()
        for dependency in (DATABASE, STORAGE):
            if report[dependency] == "ok":
                self.ctx.outages.recovered(dependency)
            else:
                self.ctx.outages.failed(dependency, report[dependency].removeprefix("error: "))
        return all(v == "ok" for v in report.values()), report

    async def _storage_health(self) -> str:
        try:
            await self.ctx.store.exists(HEALTH_PROBE_KEY)
            free = await self.ctx.store.free_bytes()
        except Exception as e:  # noqa: BLE001
            return f"error: {type(e).__name__}: {e}"[:300]
        minimum = self.ctx.limits.min_free_bytes
        if free is not None and free < minimum:
            return f"error: full: {free} bytes free, under the {minimum}-byte minimum"
        refused = await self._write_refused()
        return "ok" if refused is None else f"error: writes fail: {refused}"[:300]

    async def _write_refused(self) -> str | None:
        """Why the store refuses a small write now (None: it accepted one), probed at most every
        ``HEALTH_WRITE_EVERY`` seconds: an object store that is full or read-only still answers reads."""
        async with self._write_probe_lock:  # one probe at a time: checks that arrive meanwhile share its outcome
            now = time.monotonic()
            if self._write_probe is not None and now - self._write_probe[0] < HEALTH_WRITE_EVERY:
                return self._write_probe[1]
            try:
                await asyncio.wait_for(
                    self.ctx.store.put(HEALTH_WRITE_KEY, b"forkd-hub write probe\n"), HEALTH_WRITE_TIMEOUT
                )
                refused = None
            except TimeoutError:
                refused = f"the store did not answer a small write in {HEALTH_WRITE_TIMEOUT:g} s"
            except Exception as e:  # noqa: BLE001
                refused = f"{type(e).__name__}: {e}"
            self._write_probe = (time.monotonic(), refused)
            return refused

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
        # queue depths an operator alerts on (docs/operations.md, "Metrics and alerts"); webhook deliveries by
        # plain SQL: the webhooks package sits beside the registry, not under it
        async with self.ctx.sessions() as session:
            uploads = (await session.exec(select(func.count()).select_from(Upload))).one()
            pending = (
                await session.exec(
                    select(func.count()).select_from(text("webhook_deliveries")).where(text("state = 'pending'"))
                )
            ).one()
        self.ctx.metrics.upload_sessions.set(uploads)
        self.ctx.metrics.webhook_queue.set(pending)
