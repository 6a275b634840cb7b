"""What every registry service shares: database sessions, the blob store, limits, audit, metrics, clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import AuditLog
from hub_server.db.models import utcnow
from hub_server.metrics import HubMetrics
from hub_server.outages import Outages
from hub_server.registry.core.readcache import ReadCache
from hub_server.settings import Limits
from hub_server.storage import BlobStore

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["RegistryContext", "TagSignatures"]


class TagSignatures(Protocol):
    """Namespaces whose tags move only onto signed manifests (``content/signature_policy.py``'s
    ``SignaturePolicy``; typed here so the floor of the registry imports nothing above it)."""

    @property
    def keys(self) -> dict[str, list[Ed25519PublicKey]]: ...

    async def check_tag(
        self, ctx: RegistryContext, repository_id: int | None, namespace: str, name: str, digest: str
    ) -> str | None: ...


@dataclass
class RegistryContext:
    """Built once by ``create_app`` (or the CLI) and handed to every service."""

    sessions: async_sessionmaker[AsyncSession]
    store: BlobStore
    audit: AuditLog
    metrics: HubMetrics
    limits: Limits = field(default_factory=Limits)
    clock: Callable[[], datetime] = utcnow
    blob_redirects: bool = True
    redirect_expiry: int = 300
    cache: ReadCache = field(default_factory=ReadCache)
    """Manifest reads kept in memory; every write path calls ``cache.forget_repository`` after its commit."""
    immutable_tags: bool = False
    """Hub-wide default of the immutable-tags policy (``registry/content/policy.py``)."""
    immutable_exempt: str = "latest"
    """Hub-wide default: tag globs exempt from immutability."""
    signatures: TagSignatures | None = None
    """Namespaces whose tags move only onto signed manifests (``FORKD_HUB_SIGNATURE_POLICY``)."""
    node_ttl: float = 300.0
    """Seconds a fleet host's inventory counts for placement after its last report (``FORKD_HUB_NODE_TTL``)."""
    swarm_window: float = 1.0
    """Seconds a layer's cohort window stays open for pullers starting together (``FORKD_HUB_SWARM_WINDOW``)."""
    namespace_quota: int | None = None
    """Hub-wide default storage quota of a namespace (``FORKD_HUB_NAMESPACE_QUOTA``; ``content/quotas.py``)."""
    outages: Outages = field(default_factory=Outages)
    """Which dependencies are down as this process saw them (hub_server/outages.py): logged once per change."""
