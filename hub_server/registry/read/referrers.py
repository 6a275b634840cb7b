"""The referrers API (OCI distribution-spec 1.1, "Listing Referrers").

A generic manifest pushed with a ``subject`` is recorded in ``manifest_subjects``; the referrers
of digest D in repository R are the manifests linked to R whose subject is D, whether D exists
or not. Each is described as the spec asks: its ``mediaType``, ``digest``, ``size``,
``artifactType`` (its own, or its config's media type) and ``annotations``. Deleting a
referrer's link from R removes it from R's list.

Errors: ``HubError(DIGEST_INVALID)`` (who may read the repository is its scope's business, ``core/access.py``).
"""

from __future__ import annotations

from typing import Any

from sqlmodel import col, select

from hub_server.db.models import Manifest, ManifestSubject, RepositoryManifest
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_digest

__all__ = ["ReferrerService"]


class ReferrerService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def list(self, scope: RepositoryScope, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """Descriptors of the manifests in the repository of ``scope`` (``discover``) whose subject is
        ``digest``, oldest first, only those of ``artifact_type`` when given; none when the repository does
        not exist yet. Raises HubError(DIGEST_INVALID)."""
        subject = check_digest(digest)
        if scope.repository is None:
            return []
        repo_id = scope.id
        async with self.ctx.sessions() as session:
            query = (
                select(Manifest)
                .join(ManifestSubject, col(ManifestSubject.manifest_digest) == col(Manifest.digest))
                .join(RepositoryManifest, col(RepositoryManifest.manifest_digest) == col(Manifest.digest))
                .where(col(RepositoryManifest.repository_id) == repo_id, col(ManifestSubject.subject_digest) == subject)
                .order_by(col(Manifest.created_at), col(Manifest.digest))
            )
            if artifact_type is not None:
                query = query.where(col(Manifest.artifact_type) == artifact_type)
            rows = (await session.exec(query)).all()
        return [_descriptor(m) for m in rows]


def _descriptor(manifest: Manifest) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": manifest.media_type, "digest": manifest.digest, "size": manifest.size}
    if manifest.artifact_type:
        out["artifactType"] = manifest.artifact_type
    if manifest.annotations:
        out["annotations"] = dict(manifest.annotations)
    return out
