"""Manifests: push (verify, store exact bytes, commit in one transaction) and fetch.

A push runs, in order: the size limit, parsing (a layer manifest or a chain index), the
database checks of :mod:`pushplan`, the chunk frame verification of :mod:`verify`, the proof of
format-v2 file digests from those chunks (:mod:`filetrees`), then
stores the exact bytes received as a blob and commits every row in one transaction — links
to the repository (the document's blobs and the chain below it, so the whole chain is
pullable through this repository), verified chunk locations, and the tag. Nothing is written
before every check passed. The digest is computed over the received bytes with the algorithm
of the digest reference; for a tag, sha256 (blake3 for a format-v1 layer).

Errors: ``HubError`` (``TOO_LARGE``, ``DIGEST_INVALID``, ``MANIFEST_INVALID``,
``MANIFEST_BLOB_UNKNOWN``, ``SIZE_INVALID``, ``PARENT_UNKNOWN``, ``CHAIN_TOO_DEEP``,
``NAME_INVALID``, ``NAME_UNKNOWN``, ``MANIFEST_UNKNOWN``, ``TAG_CONFLICT``, ``TAG_IMMUTABLE``),
``Unauthorized``/``Forbidden``.
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
from hub_server.registry.content.recipes import read_blob_range
from hub_server.registry.content.tags import ANY, move_tag, resolve_reference
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import Reference, parse_reference
from hub_server.registry.core.paths import blob_key
from hub_server.registry.core.readcache import CachedManifest
from hub_server.registry.core.sql import batched, insert_ignore
from hub_server.registry.push.filetrees import prove_file_digests
from hub_server.registry.push.oci_content import OciDocument, is_forkd_document, load_manifest_json, parse_oci_document
from hub_server.registry.push.oci_plan import plan_generic
from hub_server.registry.push.pushplan import PushPlan, data_blobs_first_uploaded, plan_index, plan_layer
from hub_server.registry.push.verify import ChainIndex, parse_document, verify_frames
from manifest.digest import Digest, digest_bytes
from manifest.model import LayerManifest

__all__ = ["ManifestService", "PushResult", "StoredManifest", "too_large"]


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
class StoredManifest:
    digest: str
    media_type: str
    size: int
    data: bytes | None


class ManifestService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

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
        principal, full = scope.principal, scope.full_name
        reference = parse_reference(ref)
        limit = self.ctx.limits.manifest_bytes
        if len(body) > limit:
            raise too_large("manifest", len(body), limit)
        # Dispatch: forkd media types to their verifier (registry.verify), everything else to the
        # generic OCI checks (registry.oci_content / oci_plan). By tag, the digest is sha256 (OCI's
        # canonical one), except for a format-v1 forkd layer, still named by blake3.
        obj = load_manifest_json(body)
        document: LayerManifest | ChainIndex | OciDocument
        if is_forkd_document(obj):
            document = parse_document(body, content_type, limit)
            v1 = isinstance(document, LayerManifest) and document.version < 2
            default_algorithm = "blake3" if v1 else "sha256"
        else:
            document, default_algorithm = parse_oci_document(obj, content_type), "sha256"
        algorithm = Digest.parse(reference.digest).algorithm if reference.digest else default_algorithm
        digest = str(digest_bytes(body, algorithm))
        if reference.digest is not None and reference.digest != digest:
            raise HubError(
                ErrorCode.DIGEST_INVALID,
                f"manifest bytes hash to {digest}, not {reference.digest}",
                {"expected": reference.digest, "actual": digest},
            )

        repo = scope.row if scope.repository is not None else None
        async with self.ctx.sessions() as session:
            if isinstance(document, OciDocument):
                plan = await plan_generic(session, repo, document)
            elif isinstance(document, ChainIndex):
                plan = await plan_index(self.ctx, session, principal, repo, document)
            else:
                plan = await plan_layer(self.ctx, session, principal, repo, digest, document)
        if reference.tag is not None and self.ctx.signatures is not None:  # docs/decisions/0009-signatures.md
            await self.ctx.signatures.check_tag(
                self.ctx, repo.id if repo else None, scope.namespace, scope.name, digest
            )
        await verify_frames(partial(read_blob_range, self.ctx), plan.frames, plan.blob_sizes)
        if plan.proven_maps:  # format v2: the chunk digests hold, so the file digests can be proven from them
            async with self.ctx.sessions() as session:
                await prove_file_digests(self.ctx, session, plan.proven_maps, plan.ancestors)

        key = blob_key(digest)
        if not await self.ctx.store.exists(key):
            await self.ctx.store.put(key, body)
        created, previous = await self._commit(scope, digest, len(body), plan, reference, public, expect_tag)
        self.ctx.cache.forget_repository(scope.namespace, scope.name)  # tag moved, manifest linked, maybe made public

        if created:  # re-pushing a manifest already in this repository (e.g. to tag it) adds nothing
            await self.ctx.audit.record(
                principal.actor,
                "push",
                repository=full,
                reference=str(reference),
                digest=digest,
                remote=remote,
                detail={
                    "mediaType": plan.media_type,
                    "newChunks": len(plan.frames),
                    "reusedChunks": plan.reused_frames,
                },
            )
            # frames of data blobs pushed whole are verified (and counted) here; recipes on ingest
            self.ctx.metrics.record_chunks(stored=len(plan.frames))
        if reference.tag is not None:
            await self.ctx.audit.record(
                principal.actor,
                "tag",
                repository=full,
                reference=reference.tag,
                digest=digest,
                remote=remote,
                detail={"previous": previous},
            )
        return PushResult(digest, full, reference.tag, created, plan.subject_digest)

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

    async def _commit(
        self,
        scope: RepositoryScope,
        digest: str,
        size: int,
        plan: PushPlan,
        reference: Reference,
        public: bool,
        expect_tag: str,
    ) -> tuple[bool, str | None]:
        """Write the rows; return whether the manifest is new here and the digest the tag had before."""
        async with self.ctx.sessions() as session:
            try:
                created, previous = await self._write_rows(
                    session, scope, digest, size, plan, reference, public, expect_tag
                )
                await session.commit()
            except IntegrityError:
                # A garbage collection removed a blob between our checks and this commit.
                raise HubError(
                    ErrorCode.MANIFEST_BLOB_UNKNOWN,
                    "a referenced blob was deleted during the push; upload it again",
                    {"blobs": sorted(plan.blob_roles)},
                ) from None
        return created, previous

    async def _write_rows(
        self,
        session: AsyncSession,
        scope: RepositoryScope,
        digest: str,
        size: int,
        plan: PushPlan,
        reference: Reference,
        public: bool,
        expect_tag: str,
    ) -> tuple[bool, str | None]:
        now = self.ctx.clock()
        previous: str | None = None
        repo = await scope.created(session, public=public)
        if public and not repo.public and await _is_empty(session, repo):
            repo.public = True
        await insert_ignore(
            session, Blob, [{"digest": digest, "size": size, "media_type": plan.media_type, "created_at": now}]
        )
        created = await session.get(RepositoryManifest, (repo.id, digest)) is None
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
        await _link(session, repo, [*plan.ancestors, digest], now)
        if reference.tag is not None:
            previous = (
                await session.exec(
                    select(Tag.manifest_digest).where(Tag.repository_id == repo.id, Tag.name == reference.tag)
                )
            ).first()
            immutable = await tag_is_immutable(session, self.ctx, repo.id, reference.tag)  # type: ignore[arg-type]
            await move_tag(
                session,
                repo.id,  # type: ignore[arg-type]  # typing debt, decisions/0008
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
