"""Planning a generic OCI manifest push: everything it references must be in the repository.

OCI distribution ("Pushing Manifests"): a registry may refuse a manifest whose blobs or child
manifests it does not hold; the hub always does, and only counts what is linked to *this*
repository, so content from another repository arrives only through a blob mount (which
checks read access there). Each listed size must be the stored size. A ``subject`` need not
exist (referrers may be pushed first). Foreign layers (``urls``) are not required.

Errors: ``HubError`` (``MANIFEST_BLOB_UNKNOWN`` listing every missing digest, ``SIZE_INVALID``).
"""

from __future__ import annotations

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import Blob, BlobRole, Manifest, Repository, RepositoryBlob, RepositoryManifest
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.sql import batched
from hub_server.registry.push.oci_content import OciDescriptor, OciDocument
from hub_server.registry.push.pushplan import PushPlan

__all__ = ["plan_generic"]


async def plan_generic(session: AsyncSession, repo: Repository | None, document: OciDocument) -> PushPlan:
    """The commit plan of a structurally valid generic manifest (module docstring)."""
    blob_sizes = await _linked(session, repo, Blob, RepositoryBlob, [d.digest for d in document.blobs])
    manifest_sizes = await _linked(session, repo, Manifest, RepositoryManifest, [d.digest for d in document.manifests])
    missing = [
        d.digest
        for d in (*document.blobs, *document.manifests)
        if d.digest not in blob_sizes and d.digest not in manifest_sizes
    ]
    if missing:
        raise HubError(
            ErrorCode.MANIFEST_BLOB_UNKNOWN,
            f"the manifest references {len(missing)} blob(s) or manifest(s) this repository does not hold",
            {"blobs": list(dict.fromkeys(missing))},
        )
    for d in document.blobs:
        _check_size(d, blob_sizes[d.digest])
    for d in document.manifests:
        _check_size(d, manifest_sizes[d.digest])
    roles: dict[str, str] = {d.digest: BlobRole.MANIFEST for d in document.manifests}
    roles.update({d.digest: BlobRole.LAYER for d in document.layers if not d.foreign})
    if document.config is not None:
        roles[document.config.digest] = BlobRole.CONFIG
    return PushPlan(
        media_type=document.media_type,
        artifact_type=document.artifact_type,
        config_digest=document.config.digest if document.config else None,
        annotations=dict(document.annotations),
        blob_roles=roles,
        blob_media_types={d.digest: d.media_type for d in document.blobs},
        blob_sizes=blob_sizes,
        subject_digest=document.subject.digest if document.subject else None,
    )


async def _linked(
    session: AsyncSession,
    repo: Repository | None,
    model: type[Blob] | type[Manifest],
    link: type[RepositoryBlob] | type[RepositoryManifest],
    digests: list[str],
) -> dict[str, int]:
    """Digest → size of those among ``digests`` linked to ``repo``."""
    if repo is None or not digests:
        return {}
    link_digest = link.blob_digest if link is RepositoryBlob else link.manifest_digest  # type: ignore[union-attr]
    sizes: dict[str, int] = {}
    for batch in batched(sorted(set(digests))):
        rows = await session.exec(
            select(model.digest, model.size)
            .join(link, col(link_digest) == col(model.digest))
            .where(col(link.repository_id) == repo.id, col(model.digest).in_(batch))
        )
        sizes.update((d, s) for d, s in rows.all())
    return sizes


def _check_size(descriptor: OciDescriptor, actual: int) -> None:
    if descriptor.size != actual:
        raise HubError(
            ErrorCode.SIZE_INVALID,
            f"descriptor {descriptor.digest} declares {descriptor.size} bytes, the repository holds {actual}",
            {"digest": descriptor.digest, "declared": descriptor.size, "actual": actual},
        )
