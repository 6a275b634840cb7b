"""What every registry service shares: database sessions, the blob store, limits, audit, metrics, clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import AuditLog
from hub_server.db.models import utcnow
from hub_server.metrics import HubMetrics
from hub_server.registry.readcache import ReadCache
from hub_server.settings import Limits
from hub_server.storage import BlobStore

if TYPE_CHECKING:
    from hub_server.registry.signature_policy import SignaturePolicy

__all__ = ["RegistryContext"]


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
    """Hub-wide default of the immutable-tags policy (``registry/policy.py``)."""
    immutable_exempt: str = "latest"
    """Hub-wide default: tag globs exempt from immutability."""
    signatures: SignaturePolicy | None = None
    """Namespaces whose tags move only onto signed manifests (``FORKD_HUB_SIGNATURE_POLICY``)."""
