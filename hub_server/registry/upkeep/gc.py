"""Garbage collection: apply retention, mark from tags (following parents), sweep what nothing reaches.

Retention first (``registry/upkeep/retention.py``): every tag a repository's retention policy expires
is removed (``dry_run``: only listed, and left out of the roots below so the report shows what
it would release). What only those tags kept alive — ``retention_manifests`` — then goes like
any unreferenced manifest, after the grace period; everything a kept tag reaches stays.

Mark: every tagged manifest is a root, and so is every generic OCI manifest (not a forkd layer
or chain index) still linked to a repository: OCI clients push index children, signatures and
other referrers by digest, and they stay until deleted (``DELETE …/manifests/<digest>``). From
each marked manifest follow its parent digest and, for a
chain index, the manifests it lists. A marked manifest marks its own bytes and every blob it
references (config, vmstate, chunk maps, data blobs).

One replica sweeps at a time, and the grace period runs from when an object became
unreferenced (``registry/upkeep/gcstate.py``): a run records when it first finds a manifest or blob
unmarked and sweeps it only on a later run at least the grace period after that (with a zero
grace, at once). An unmarked manifest not yet due still counts as a root, so its parents and
blobs stay too; a manifest or blob a push just stored is first seen unmarked no earlier than it
was written, so a push in flight (which tags last) keeps everything for the grace period. A run that finds the lease held raises ``GcBusy`` (the periodic GC skips).

Sweep, only what is older than the grace period — so a push in flight never loses a blob it
just uploaded but has not referenced yet:

- unmarked manifests (with their links and reference rows),
- unmarked blobs (with their verified chunk locations and repository links) and their bytes,
- objects under ``blobs/`` with no row (a crash between move and commit), under ``uploads/``
  with no session, and upload sessions idle longer than the upload lifetime,
- for data blobs stored as recipes (registry/push/packs.py), reachability continues blob → recipe →
  frames → packs: a swept blob's recipe rows go with it, then every frame no recipe lists,
  then every pack none of whose frames is left (row and object). A pack with any live frame is
  kept whole (its dead frames are not repacked: packs are immutable, and a layer's frames
  mostly live and die together); ``packs/`` objects with no row are swept like orphan blobs,
- the store's own abandoned staging (``purge_staging``).

Rows go first, in one transaction that re-checks each blob is still unreferenced; bytes go
after, so a crash leaves at worst an orphan object, collected on the next run. A swept manifest
still linked to a repository is audited there as a ``delete`` (webhooks deliver it).
``dry_run`` reports the same lists without deleting anything.

Errors: storage and database errors propagate (the run is counted as failed in the metrics).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete
from sqlmodel import col, select

from hub_server.db.models import (
    Blob,
    BlobRole,
    Chunk,
    Frame,
    Manifest,
    ManifestBlob,
    Pack,
    RecipeFrame,
    Repository,
    RepositoryBlob,
    RepositoryManifest,
    Tag,
    Upload,
)
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.paths import (
    BLOBS_PREFIX,
    FRAME_PACKS_PREFIX,
    UPLOADS_PREFIX,
    blob_key,
    digest_from_blob_key,
    is_pack_key,
    upload_key,
)
from hub_server.registry.core.sql import batched
from hub_server.registry.upkeep.gcstate import (
    HOLD_PREFIX,
    acquire_lease,
    holder_name,
    release_hold,
    release_lease,
    settle_marks,
)
from hub_server.registry.upkeep.retention import ExpiredTag, expire_tags, plan_retention
from hub_server.registry.upkeep.usage import stored_bytes
from hub_server.storage import BlobNotFound
from manifest import mediatypes as mt

__all__ = ["GarbageCollector", "GcReport"]

log = logging.getLogger(__name__)

#: forkd snapshots live while a tag reaches them; any other OCI manifest while a repository links it.
FORKD_ARTIFACTS = (mt.LAYER_ARTIFACT, mt.CHAIN_ARTIFACT)


@dataclass
class GcReport:
    """What a run deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool
    started: datetime
    grace_seconds: float
    manifests: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    uploads: list[str] = field(default_factory=list)
    orphan_objects: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept_manifests: int = 0
    kept_blobs: int = 0
    staging_purged: int = 0
    packs: list[str] = field(default_factory=list)
    """Cached forkd packs pruned (registry/forkd/compat.py)."""
    pack_objects: list[str] = field(default_factory=list)
    """Frame packs deleted: none of their frames is in a live recipe (registry/push/packs.py)."""
    retention: list[dict[str, Any]] = field(default_factory=list)
    """Tags retention policies removed (would remove): repository, tag, digest, updated, reason."""
    retention_manifests: list[str] = field(default_factory=list)
    """Manifests only those tags reached: swept once unreferenced for the grace period."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["started"] = self.started.isoformat()
        return out


class GarbageCollector:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def hold(self, duration: timedelta, actor: str) -> datetime:
        """Keep every replica from collecting for ``duration`` (a backup: nothing is deleted meanwhile); returns
        until when. Raises GcBusy while a run is sweeping (hold once it ends)."""
        until = self.ctx.clock() + duration
        async with self.ctx.sessions() as session:
            await acquire_lease(session, f"{HOLD_PREFIX}{actor}:{holder_name()}", self.ctx.clock(), duration)
        await self.ctx.audit.record(actor, "gc.hold", detail={"until": until.isoformat()})
        return until

    async def release_hold(self, actor: str) -> bool:
        """End a hold taken by :meth:`hold`; whether one was held."""
        async with self.ctx.sessions() as session:
            released = await release_hold(session)
        if released:
            await self.ctx.audit.record(actor, "gc.release", detail={})
        return released

    async def run(
        self,
        *,
        grace: timedelta | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
        actor: str = "gc",
    ) -> GcReport:
        """Collect garbage older than ``grace`` (default ``limits.gc_grace``) as of ``now``."""
        now = now or self.ctx.clock()
        grace = self.ctx.limits.gc_grace if grace is None else grace
        report = GcReport(dry_run, now, grace.total_seconds())
        holder = holder_name()
        if not dry_run:
            async with self.ctx.sessions() as session:
                await acquire_lease(session, holder, self.ctx.clock())  # GcBusy: another replica sweeps
        try:
            expired = await plan_retention(self.ctx, now)
            if not dry_run:
                expired = await expire_tags(self.ctx, expired, actor)
            report.retention = [e.to_json() for e in expired]
            await self._collect(report, now - grace, now - self.ctx.limits.upload_lifetime, grace, expired, actor)
        except BaseException:
            self.ctx.metrics.record_gc("error")
            raise
        finally:
            if not dry_run:
                self.ctx.cache.forget_all()  # links may be gone from any repository
                async with self.ctx.sessions() as session:
                    await release_lease(session, holder)
        self.ctx.metrics.record_gc("dry_run" if dry_run else "ok", 0 if dry_run else report.bytes_freed)
        if not dry_run:
            self.ctx.metrics.storage_used_bytes.set(await stored_bytes(self.ctx))
        await self.ctx.audit.record(
            actor,
            "gc",
            detail={
                "dryRun": dry_run,
                "manifests": len(report.manifests),
                "blobs": len(report.blobs),
                "uploads": len(report.uploads),
                "orphanObjects": len(report.orphan_objects),
                "packs": len(report.packs),
                "packObjects": len(report.pack_objects),
                "retentionTags": len(report.retention),
                "bytesFreed": report.bytes_freed,
            },
        )
        log.info(
            "gc %s: %d manifests, %d blobs, %d uploads, %d orphan objects, %d bytes",
            "dry run" if dry_run else "done",
            len(report.manifests),
            len(report.blobs),
            len(report.uploads),
            len(report.orphan_objects),
            report.bytes_freed,
        )
        return report

    async def _collect(
        self,
        report: GcReport,
        cutoff: datetime,
        upload_cutoff: datetime,
        grace: timedelta,
        expired: list[ExpiredTag],
        actor: str,
    ) -> None:
        async with self.ctx.sessions() as session:
            rows = (
                await session.exec(
                    select(Manifest.digest, Manifest.parent_digest, Manifest.created_at, Manifest.artifact_type)
                )
            ).all()
            manifests = {d: (p, c) for d, p, c, _ in rows}
            generic = {d for d, _, _, artifact_type in rows if artifact_type not in FORKD_ARTIFACTS}
            linked = set((await session.exec(select(RepositoryManifest.manifest_digest).distinct())).all())
            references = (
                await session.exec(select(ManifestBlob.manifest_digest, ManifestBlob.blob_digest, ManifestBlob.role))
            ).all()
            gone = {(e.repository_id, e.tag) for e in expired}  # already deleted, unless a dry run
            tagged = {
                d
                for r, n, d in (await session.exec(select(Tag.repository_id, Tag.name, Tag.manifest_digest))).all()
                if (r, n) not in gone
            }
            blob_rows = await session.exec(select(Blob.digest, Blob.size, Blob.created_at))
            blobs = {d: (s, c) for d, s, c in blob_rows.all()}
            uploads = {u.id: u for u in (await session.exec(select(Upload))).all()}
            pack_rows = set((await session.exec(select(Pack.key))).all())

        children: dict[str, list[str]] = {}
        for m, b, role in references:
            if role == BlobRole.MANIFEST:
                children.setdefault(m, []).append(b)
        # The young are protected by their marks' grace period instead; generic OCI content by its links.
        roots = (set(tagged) | (generic & linked)) & set(manifests)
        marked = _reach(roots, manifests, children)
        released = _reach(roots | {e.digest for e in expired}, manifests, children) - marked
        report.retention_manifests = sorted(released)
        tagged_blobs = set(marked) | {b for m, b, _ in references if m in marked}
        async with self.ctx.sessions() as session:
            due = await settle_marks(
                session, "manifest", set(manifests) - marked, report.started, grace, dry_run=report.dry_run
            )
            # The clock of a blob starts with its manifest's, but the blob stays while that manifest does.
            due_blobs = await settle_marks(
                session, "blob", set(blobs) - tagged_blobs, report.started, grace, dry_run=report.dry_run
            )
            await session.commit()
        marked = _reach(roots | (set(manifests) - marked - due), manifests, children)  # not due: still roots
        marked_blobs = set(marked) | {b for m, b, _ in references if m in marked}
        due_blobs -= marked_blobs

        report.manifests = sorted(set(manifests) - marked)
        report.kept_manifests = len(marked)
        report.blobs = sorted(due_blobs)
        report.kept_blobs = len(blobs) - len(report.blobs)
        report.uploads = sorted(u.id for u in uploads.values() if u.updated_at <= upload_cutoff)
        report.orphan_objects = await self._orphans(set(blobs), set(uploads), pack_rows, cutoff)
        from hub_server.registry.forkd.compat import prune_packs  # forkd packs cached for deleted manifests

        report.packs = await prune_packs(self.ctx, dry_run=True)
        if report.dry_run:
            report.bytes_freed = sum(blobs[d][0] for d in report.blobs)
            return

        report.blobs, unlinked = await self._delete_rows(report, marked_blobs)
        for repository, digest in unlinked:
            await self.ctx.audit.record(actor, "delete", repository=repository, digest=digest, detail={"gc": True})
        report.pack_objects = await self._delete_dead_packs(cutoff)
        freed = 0
        for key in report.pack_objects:
            freed += await self._delete_object(key)
        for digest in report.blobs:
            freed += await self._delete_object(blob_key(digest))
        for upload_id in report.uploads:
            freed += await self._delete_object(upload_key(upload_id))
        for key in report.orphan_objects:
            freed += await self._delete_object(key)
        report.bytes_freed = freed
        report.packs = await prune_packs(self.ctx)
        report.staging_purged = await self.ctx.store.purge_staging(max(report.started - cutoff, timedelta(0)))

    async def _orphans(
        self, blob_rows: set[str], upload_rows: set[str], pack_rows: set[str], cutoff: datetime
    ) -> list[str]:
        """Stored objects without a row, last written before ``cutoff``."""
        out: list[str] = []
        store = self.ctx.store
        for prefix in (BLOBS_PREFIX, UPLOADS_PREFIX, FRAME_PACKS_PREFIX):
            async for key in store.list(prefix):
                if prefix == BLOBS_PREFIX:
                    digest = digest_from_blob_key(key)
                    if digest is not None and digest in blob_rows:
                        continue
                elif prefix == FRAME_PACKS_PREFIX:
                    if not is_pack_key(key) or key in pack_rows:
                        continue
                elif key.rsplit("/", 1)[-1] in upload_rows:
                    continue
                try:
                    info = await store.stat(key)
                except BlobNotFound:
                    continue
                if info.modified <= cutoff:
                    out.append(key)
        return out

    async def _delete_rows(self, report: GcReport, marked_blobs: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
        """Delete the swept rows in one transaction; return the blobs actually deleted and the
        (repository, manifest) links the swept manifests had."""
        unlinked: list[tuple[str, str]] = []
        async with self.ctx.sessions() as session:
            for batch in batched(report.manifests):
                links = await session.exec(
                    select(Repository.namespace, Repository.name, RepositoryManifest.manifest_digest)
                    .join(Repository, col(Repository.id) == RepositoryManifest.repository_id)
                    .where(col(RepositoryManifest.manifest_digest).in_(batch))
                )
                unlinked.extend((f"{ns}/{name}", digest) for ns, name, digest in links.all())
                await session.exec(delete(ManifestBlob).where(col(ManifestBlob.manifest_digest).in_(batch)))
                await session.exec(delete(RepositoryManifest).where(col(RepositoryManifest.manifest_digest).in_(batch)))
                await session.exec(delete(Manifest).where(col(Manifest.digest).in_(batch)))
            for batch in batched(report.uploads):
                await session.exec(delete(Upload).where(col(Upload.id).in_(batch)))
            # We hold the write lock now: a blob referenced meanwhile by a concurrent push is kept.
            deleted: list[str] = []
            for batch in batched(report.blobs):
                used = set(
                    (
                        await session.exec(
                            select(ManifestBlob.blob_digest).where(col(ManifestBlob.blob_digest).in_(batch))
                        )
                    ).all()
                )
                used |= set((await session.exec(select(Manifest.digest).where(col(Manifest.digest).in_(batch)))).all())
                gone = [d for d in batch if d not in used and d not in marked_blobs]
                if not gone:
                    continue
                await session.exec(delete(Chunk).where(col(Chunk.blob_digest).in_(gone)))
                await session.exec(delete(RecipeFrame).where(col(RecipeFrame.blob_digest).in_(gone)))
                await session.exec(delete(RepositoryBlob).where(col(RepositoryBlob.blob_digest).in_(gone)))
                await session.exec(delete(Blob).where(col(Blob.digest).in_(gone)))
                deleted.extend(gone)
            await session.commit()
        return deleted, sorted(unlinked)

    async def _delete_dead_packs(self, cutoff: datetime) -> list[str]:
        """Delete the rows of frames no recipe lists, then of packs (older than ``cutoff``) with no
        frame left; return those packs' keys (their objects go after, like blobs')."""
        async with self.ctx.sessions() as session:
            live = select(RecipeFrame.frame_digest).distinct()
            await session.exec(delete(Frame).where(col(Frame.digest).not_in(live)))
            used = select(Frame.pack_key).distinct()
            dead = list(
                (
                    await session.exec(
                        select(Pack.key).where(col(Pack.key).not_in(used), col(Pack.created_at) <= cutoff)
                    )
                ).all()
            )
            for batch in batched(dead):
                await session.exec(delete(Pack).where(col(Pack.key).in_(batch)))
            await session.commit()
        return sorted(dead)

    async def _delete_object(self, key: str) -> int:
        """Delete one object; return how many bytes that freed (0 if it was already gone)."""
        try:
            size = (await self.ctx.store.stat(key)).size
            await self.ctx.store.delete(key)
        except BlobNotFound:
            return 0
        return size


def _reach(
    roots: set[str], manifests: dict[str, tuple[str | None, datetime]], children: dict[str, list[str]]
) -> set[str]:
    """Every manifest reachable from ``roots`` through parents and chain-index entries."""
    marked: set[str] = set()
    stack = list(roots)
    while stack:
        digest = stack.pop()
        if digest in marked or digest not in manifests:
            continue
        marked.add(digest)
        parent = manifests[digest][0]
        stack.extend([parent] if parent else [])
        stack.extend(children.get(digest, []))
    return marked
