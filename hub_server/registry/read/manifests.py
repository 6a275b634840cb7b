"""Manifest reads: the exact bytes pushed, by tag or digest, for ``GET``/``HEAD /v2/{ns}/{repo}/manifests/{ref}``.

The hot path of every fleet polling the hub: the repository is resolved through the read cache
(``core/readcache.py``: its facts for the TTL, tags and links as they are found), the manifest's
bytes are kept by digest, and ``api/fastpath.py`` answers what the cache holds whole before Litestar.

Errors: ``HubError`` (``MANIFEST_UNKNOWN``, ``NAME_INVALID`` / ``DIGEST_INVALID`` for a malformed reference).
"""

from __future__ import annotations

from dataclasses import dataclass

from hub_server.db.models import Manifest
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.tags import resolve_reference
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import parse_reference
from hub_server.registry.core.paths import blob_key
from hub_server.registry.core.readcache import CachedManifest

__all__ = ["ManifestReader", "StoredManifest"]


@dataclass(frozen=True)
class StoredManifest:
    digest: str
    media_type: str
    size: int
    data: bytes | None


class ManifestReader:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def get(self, scope: RepositoryScope, ref: str, *, with_body: bool = True) -> StoredManifest:
        """The exact bytes pushed for ``ref`` in the repository of ``scope`` (``data`` is None without ``with_body``).

        ``scope`` is a ``pull`` scope resolved through the read cache (``cached=True``: repository facts
        for the TTL); manifests by digest are served from ``ctx.cache`` too. Raises: HubError
        (MANIFEST_UNKNOWN, NAME_INVALID / DIGEST_INVALID for a malformed ``ref``).
        """
        reference = parse_reference(ref)
        cache = self.ctx.cache
        epoch = scope.epoch
        facts = scope.facts
        digest = (
            facts.tags.get(reference.tag)
            if reference.tag is not None
            else (reference.digest if reference.digest in facts.linked else None)
        )
        if digest is None:
            async with self.ctx.sessions() as session:
                digest = await resolve_reference(session, facts, reference)  # type: ignore[arg-type]
            cache.remember_reference(facts, reference.tag, digest, epoch)
        manifest = cache.manifest(digest)
        if manifest is None:
            async with self.ctx.sessions() as session:
                row = await session.get(Manifest, digest)
            if row is None:  # pragma: no cover - links reference existing manifests (foreign key)
                raise HubError(ErrorCode.MANIFEST_UNKNOWN, f"manifest {digest} is unknown", {"digest": digest})
            manifest = CachedManifest(digest, row.media_type, row.size, await self.ctx.store.read(blob_key(digest)))
            cache.remember_manifest(manifest)
        return StoredManifest(digest, manifest.media_type, manifest.size, manifest.data if with_body else None)
