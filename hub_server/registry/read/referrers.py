"""The referrers API (OCI distribution-spec 1.1, "Listing Referrers").

A generic manifest pushed with a ``subject`` is recorded in ``manifest_subjects``; the referrers
of digest D in repository R are the manifests linked to R whose subject is D, whether D exists
or not. Each is described as the spec asks: its ``mediaType``, ``digest``, ``size``,
``artifactType`` (its own, or its config's media type) and ``annotations``. Deleting a
referrer's link from R removes it from R's list.

Bounded by design (issue 27): an answer is one **page**, oldest first, of at most
``limits.referrers_page`` descriptors and :data:`PAGE_BYTES` of JSON (always at least one
descriptor); :attr:`ReferrerPage.next_last` says where the next one starts (the API sends it as a
``Link``). Rows are read a few at a time until the page is full, so what a request reads and holds
is bounded by the page, not by how many referrers a subject has or how large their annotations are
(each ≤ ``limits.annotation_bytes`` since pushes are checked, ``registry/push/limits.py``).

Errors: ``HubError(DIGEST_INVALID)``; ``HubError(INVALID_REQUEST)`` for a ``last`` that names no
referrer of the subject here (who may read the repository is its scope's business, ``core/access.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_
from sqlmodel import col, select

from hub_server.db.models import Manifest, ManifestSubject, RepositoryManifest
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_digest

__all__ = ["PAGE_BYTES", "ReferrerPage", "ReferrerService"]

#: The most JSON one page of descriptors holds (a page always holds at least one).
PAGE_BYTES = 1 << 20
#: Rows read per query while a page fills.
_BATCH = 16


@dataclass(frozen=True)
class ReferrerPage:
    """Descriptors of one page, oldest first; ``next_last``: the ``last=`` of the next page, or None."""

    manifests: list[dict[str, Any]]
    next_last: str | None


class ReferrerService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def page(
        self,
        scope: RepositoryScope,
        digest: str,
        artifact_type: str | None = None,
        *,
        last: str | None = None,
        n: int | None = None,
    ) -> ReferrerPage:
        """One page of descriptors of the manifests in the repository of ``scope`` (``discover``) whose subject
        is ``digest``, oldest first, only those of ``artifact_type`` when given: after the referrer
        ``last`` (a digest from the previous page's ``next_last``), at most ``n`` (≤ the limit). An empty
        page when the repository does not exist yet (``discover``: a caller who may read the name).

        Raises: HubError(DIGEST_INVALID, INVALID_REQUEST).
        """
        subject = check_digest(digest)
        if scope.repository is None:
            return ReferrerPage([], None)
        size = self.ctx.limits.referrers_page if n is None else max(1, min(n, self.ctx.limits.referrers_page))
        query = (
            select(Manifest)
            .join(ManifestSubject, col(ManifestSubject.manifest_digest) == col(Manifest.digest))
            .join(RepositoryManifest, col(RepositoryManifest.manifest_digest) == col(Manifest.digest))
            .where(col(RepositoryManifest.repository_id) == scope.id, col(ManifestSubject.subject_digest) == subject)
            .order_by(col(Manifest.created_at), col(Manifest.digest))
        )
        if artifact_type is not None:
            query = query.where(col(Manifest.artifact_type) == artifact_type)
        out: list[dict[str, Any]] = []
        used = 0
        async with self.ctx.sessions() as session:
            if last is not None:
                query = query.where(await _after(session, scope.id, subject, last))
            offset = 0
            while True:  # a batch at a time: at most one batch past the page is read
                rows = (await session.exec(query.offset(offset).limit(_BATCH))).all()
                for row in rows:
                    descriptor = _descriptor(row)
                    cost = len(json.dumps(descriptor, separators=(",", ":"), ensure_ascii=False).encode()) + 1
                    if len(out) == size or (out and used + cost > PAGE_BYTES):
                        return ReferrerPage(out, out[-1]["digest"])  # this row starts the next page
                    out.append(descriptor)
                    used += cost
                if len(rows) < _BATCH:
                    return ReferrerPage(out, None)
                offset += len(rows)

    async def list(self, scope: RepositoryScope, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """The first page's descriptors (:meth:`page`). Raises: as :meth:`page`."""
        return (await self.page(scope, digest, artifact_type)).manifests


async def _after(session: Any, repository_id: int, subject: str, last: str) -> Any:
    """The condition "ordered after referrer ``last``". Raises HubError(INVALID_REQUEST)."""
    row = (
        await session.exec(
            select(Manifest.created_at)
            .join(ManifestSubject, col(ManifestSubject.manifest_digest) == col(Manifest.digest))
            .join(RepositoryManifest, col(RepositoryManifest.manifest_digest) == col(Manifest.digest))
            .where(
                col(RepositoryManifest.repository_id) == repository_id,
                col(ManifestSubject.subject_digest) == subject,
                col(Manifest.digest) == last[:200],
            )
        )
    ).first()
    if row is None:
        raise HubError(
            ErrorCode.INVALID_REQUEST,
            f"last={last[:80]!r} names no referrer of {subject} in this repository",
            {"field": "last"},
        )
    return or_(col(Manifest.created_at) > row, and_(col(Manifest.created_at) == row, col(Manifest.digest) > last))


def _descriptor(manifest: Manifest) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": manifest.media_type, "digest": manifest.digest, "size": manifest.size}
    if manifest.artifact_type:
        out["artifactType"] = manifest.artifact_type
    if manifest.annotations:
        out["annotations"] = dict(manifest.annotations)
    return out
