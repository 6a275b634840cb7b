"""Manifest pushes: verify, store the exact bytes, commit in one transaction (reads: ``read/manifests.py``).

A push runs, in order: the size limit, recognising its kind (:mod:`kinds`: a forkd layer, a forkd
chain index or any other OCI content, each with its own handler), the kind's database checks
(:mod:`pushplan`, :mod:`oci_plan`), the annotation limit (:mod:`limits`), a required signature, the chunk frame verification of
:mod:`verify`, the proof of format-v2 file digests from those chunks (:mod:`filetrees`) and of
their declared whole-file sha256 (:mod:`filesha`, bounded by ``FORKD_HUB_FILE_SHA256_CHECKS``), then
stores the exact bytes received as a blob and commits every row in one transaction — links
to the repository (the document's blobs and the chain below it, so the whole chain is
pullable through this repository), verified chunk locations, and the tag, after the namespace's
and the repository's limits (repositories, referrers per subject, tags: :mod:`limits`). Nothing is written
before every check passed. The digest is computed over the received bytes with the algorithm
of the digest reference; for a tag, sha256 (blake3 for a format-v1 layer).

Errors: ``HubError`` (``TOO_LARGE``, ``DIGEST_INVALID``, ``MANIFEST_INVALID``,
``MANIFEST_BLOB_UNKNOWN``, ``SIZE_INVALID``, ``PARENT_UNKNOWN``, ``CHAIN_TOO_DEEP``,
``NAME_INVALID`` (a bad tag), ``MANIFEST_UNKNOWN``, ``TAG_CONFLICT``, ``TAG_IMMUTABLE``,
``SIGNATURE_REQUIRED``, ``QUOTA_EXCEEDED``). Who may push is the scope's business (``core/access.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import (
    Blob,
    Chunk,
    Manifest,
    ManifestBlob,
    ManifestSubject,
    Repository,
    RepositoryBlob,
    RepositoryManifest,
    Tag,
)
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.policy import tag_is_immutable
from hub_server.registry.content.quotas import check_links, usage_if_limited
from hub_server.registry.content.recipes import read_blob_range
from hub_server.registry.content.tags import ANY, move_tag
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import Reference, parse_reference
from hub_server.registry.core.paths import blob_key
from hub_server.registry.core.sql import batched, insert_ignore
from hub_server.registry.push.filesha import FileSha256Checker
from hub_server.registry.push.filetrees import prove_file_digests
from hub_server.registry.push.kinds import ManifestKind, manifest_kind
from hub_server.registry.push.limits import check_annotations, check_referrers, check_tags
from hub_server.registry.push.pushplan import PushPlan, data_blobs_first_uploaded
from hub_server.registry.push.verify import verify_frames
from manifest.digest import Digest, digest_bytes

__all__ = ["ManifestService", "PushResult", "too_large"]


def too_large(what: str, size: int, limit: int) -> HubError:
    return HubError(ErrorCode.TOO_LARGE, f"{what} is over the {limit}-byte limit", {"limit": limit, "size": size})


@dataclass(frozen=True)
class PushResult:
    digest: str
    repository: str
    tag: str | None
    created: bool
    """False when the manifest was already in this repository (a re-push only moves the tag)."""
    subject: str | None = None
    """The ``subject`` digest of a generic manifest (the API answers it as ``OCI-Subject``)."""


@dataclass(frozen=True)
class _Push:
    """A manifest push that passed every check: what the commit writes and the audit records."""

    scope: RepositoryScope
    reference: Reference
    digest: str
    size: int
    plan: PushPlan


class ManifestService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx
        self.file_sha256 = FileSha256Checker(ctx)

    async def put(
        self,
        scope: RepositoryScope,
        ref: str,
        body: bytes,
        content_type: str | None = None,
        *,
        public: bool = False,
        remote: str | None = None,
        expect_tag: str = ANY,
    ) -> PushResult:
        """Verify and store a manifest pushed to the repository of ``scope`` (``push``); tag it when ``ref`` is a tag.

        ``public`` makes the repository public when this is its first manifest. ``expect_tag``
        (a digest, ``tags.ABSENT`` or ``tags.ANY``) is where the tag must still point for the
        push to move it; otherwise nothing is stored and HubError(TAG_CONFLICT) is raised.
        """
        reference = parse_reference(ref)
        limit = self.ctx.limits.manifest_bytes
        if len(body) > limit:
            raise too_large("manifest", len(body), limit)
        kind = manifest_kind(body, content_type, limit)
        digest = _digest_of(body, reference, kind.tag_algorithm)
        push = _Push(scope, reference, digest, len(body), await self._checked(scope, kind, reference, digest))
        key = blob_key(digest)
        if not await self.ctx.store.exists(key):
            await self.ctx.store.put(key, body)
        created, previous = await self._commit(push, public, expect_tag)
        self.ctx.cache.forget_repository(scope.namespace, scope.name)  # tag moved, manifest linked, maybe made public
        await self._record(push, created, previous, remote)
        return PushResult(digest, scope.full_name, reference.tag, created, push.plan.subject_digest)

    async def _checked(self, scope: RepositoryScope, kind: ManifestKind, reference: Reference, digest: str) -> PushPlan:
        """Every check before anything is written: the kind's plan, a required signature, the new frames,
        the format-v2 file digests proven from those frames' chunk digests, then their whole-file sha256."""
        async with self.ctx.sessions() as session:
            plan = await kind.plan(self.ctx, session, scope, digest)
        check_annotations(plan.annotations, self.ctx.limits.annotation_bytes)
        if reference.tag is not None and self.ctx.signatures is not None:  # docs/decisions/0009-signatures.md
            repo = scope.found
            await self.ctx.signatures.check_tag(
                self.ctx, repo.id if repo else None, scope.namespace, scope.name, digest
            )
        await verify_frames(partial(read_blob_range, self.ctx), plan.frames, plan.blob_sizes)
        if plan.proven_maps:  # format v2: the chunk digests hold, so the file digests can be proven from them
            async with self.ctx.sessions() as session:
                await prove_file_digests(self.ctx, session, plan.proven_maps, plan.ancestors)
            await self.file_sha256.check(
                scope.namespace, digest, plan.proven_maps, plan.ancestors, plan.file_sha256, plan.unchanged_files
            )
        return plan

    async def _record(self, push: _Push, created: bool, previous: str | None, remote: str | None) -> None:
        """The audit events (``push`` when the manifest is new here, ``tag`` when a tag moved) and chunk metrics."""
        actor, full, plan = push.scope.principal.actor, push.scope.full_name, push.plan
        if created:  # re-pushing a manifest already in this repository (e.g. to tag it) adds nothing
            await self.ctx.audit.record(
                actor,
                "push",
                repository=full,
                reference=str(push.reference),
                digest=push.digest,
                remote=remote,
                detail={
                    "mediaType": plan.media_type,
                    "newChunks": len(plan.frames),
                    "reusedChunks": plan.reused_frames,
                },
            )
            # frames of data blobs pushed whole are verified (and counted) here; recipes on ingest
            self.ctx.metrics.record_chunks(stored=len(plan.frames))
        if push.reference.tag is not None:
            await self.ctx.audit.record(
                actor,
                "tag",
                repository=full,
                reference=push.reference.tag,
                digest=push.digest,
                remote=remote,
                detail={"previous": previous},
            )

    async def _commit(self, push: _Push, public: bool, expect_tag: str) -> tuple[bool, str | None]:
        """Write the rows; return whether the manifest is new here and the digest the tag had before."""
        async with self.ctx.sessions() as session:
            try:
                created, previous = await self._write_rows(session, push, public, expect_tag)
                await session.commit()
            except IntegrityError:
                # A garbage collection removed a blob between our checks and this commit.
                raise HubError(
                    ErrorCode.MANIFEST_BLOB_UNKNOWN,
                    "a referenced blob was deleted during the push; upload it again",
                    {"blobs": sorted(push.plan.blob_roles)},
                ) from None
        return created, previous

    async def _write_rows(
        self, session: AsyncSession, push: _Push, public: bool, expect_tag: str
    ) -> tuple[bool, str | None]:
        now = self.ctx.clock()
        digest, size, plan, reference = push.digest, push.size, push.plan, push.reference
        previous: str | None = None
        limits = self.ctx.limits
        repo = await push.scope.created(session, public=public, limit=limits.repositories_per_namespace)
        assert repo.id is not None
        if public and not repo.public and await _is_empty(session, repo):
            repo.public = True
        await insert_ignore(
            session, Blob, [{"digest": digest, "size": size, "media_type": plan.media_type, "created_at": now}]
        )
        created = await session.get(RepositoryManifest, (repo.id, digest)) is None
        if created and plan.subject_digest is not None:
            await check_referrers(session, repo.id, plan.subject_digest, digest, limits.referrers_per_subject)
        if reference.tag is not None:
            await check_tags(session, repo.id, reference.tag, limits.tags_per_repository)
        if await session.get(Manifest, digest) is None:
            session.add(
                Manifest(
                    digest=digest,
                    size=size,
                    media_type=plan.media_type,
                    artifact_type=plan.artifact_type,
                    config_digest=plan.config_digest,
                    parent_digest=plan.parent_digest,
                    created_at=now,
                    logical_size=plan.logical_size,
                    stored_size=await data_blobs_first_uploaded(session, plan),
                    shared_with_parent=plan.shared_with_parent,
                    compat=plan.compat,
                    annotations=plan.annotations,
                )
            )
            await session.flush()
            await insert_ignore(
                session,
                ManifestBlob,
                [{"manifest_digest": digest, "blob_digest": b, "role": role} for b, role in plan.blob_roles.items()],
            )
            if plan.subject_digest is not None:
                session.add(ManifestSubject(manifest_digest=digest, subject_digest=plan.subject_digest))
        for media_type, group in _by_media_type(plan.blob_media_types).items():
            for batch in batched(group):
                await session.exec(
                    update(Blob)
                    .where(col(Blob.digest).in_(batch), col(Blob.media_type).is_(None))
                    .values(media_type=media_type)
                )
        await insert_ignore(
            session,
            Chunk,
            [{"digest": f.digest, "blob_digest": f.blob, "offset": f.offset, "length": f.length} for f in plan.frames],
        )
        before = await usage_if_limited(session, self.ctx, repo.namespace)
        await _link(session, repo, [*plan.ancestors, digest], now)
        if before is not None:  # the chain's blobs linked from elsewhere may take the namespace over its quota
            await check_links(session, self.ctx, repo.namespace, before)
        if reference.tag is not None:
            previous = (
                await session.exec(
                    select(Tag.manifest_digest).where(Tag.repository_id == repo.id, Tag.name == reference.tag)
                )
            ).first()
            immutable = await tag_is_immutable(session, self.ctx, repo.id, reference.tag)
            await move_tag(
                session,
                repo.id,
                reference.tag,
                digest,
                now,
                expect_tag,
                immutable=immutable,
                repository=repo.full_name,
            )
        repo.updated_at = now
        session.add(repo)
        return created, previous


async def _is_empty(session: AsyncSession, repo: Repository) -> bool:
    found = await session.exec(
        select(RepositoryManifest.manifest_digest).where(RepositoryManifest.repository_id == repo.id).limit(1)
    )
    return found.first() is None


async def _link(session: AsyncSession, repo: Repository, manifests: list[str], now: datetime) -> None:
    """Link manifests, their own bytes and every blob they reference to ``repo``."""
    blobs = set(manifests)
    for batch in batched(manifests):
        rows = await session.exec(select(ManifestBlob.blob_digest).where(col(ManifestBlob.manifest_digest).in_(batch)))
        blobs.update(rows.all())
    await insert_ignore(
        session,
        RepositoryBlob,
        [{"repository_id": repo.id, "blob_digest": b, "created_at": now} for b in sorted(blobs)],
    )
    await insert_ignore(
        session,
        RepositoryManifest,
        [{"repository_id": repo.id, "manifest_digest": m, "created_at": now} for m in manifests],
    )


def _by_media_type(media_types: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for digest, media_type in media_types.items():
        out.setdefault(media_type, []).append(digest)
    return out


def _digest_of(body: bytes, reference: Reference, tag_algorithm: str) -> str:
    """The digest of the pushed bytes: by the algorithm of a digest reference (which it must equal),
    else by ``tag_algorithm``. Raises HubError(DIGEST_INVALID)."""
    algorithm = Digest.parse(reference.digest).algorithm if reference.digest else tag_algorithm
    digest = str(digest_bytes(body, algorithm))
    if reference.digest is not None and reference.digest != digest:
        raise HubError(
            ErrorCode.DIGEST_INVALID,
            f"manifest bytes hash to {digest}, not {reference.digest}",
            {"expected": reference.digest, "actual": digest},
        )
    return digest
