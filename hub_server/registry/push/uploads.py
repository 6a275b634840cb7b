"""Blob upload sessions: start, append, status, finish (verify + publish), cancel, mount.

A session stages bytes at ``uploads/<id>`` (``paths.upload_key``) and grows by append across
requests; the store's object size is the committed size a client resumes from. ``finish``
re-hashes the whole staged object (in worker threads), moves it to its content address only
if it matches, and links it to the repository; on a mismatch the staged bytes and the session
are deleted. A data blob's session may declare its recipe first (``declare_recipe``): its
PATCHes then verify the frames as they stream in (registry/push/upload_verify.py) and
``finish_recipe`` only commits. At most one request works on a session at a time, whichever replica it reaches:
it holds the session's lease (registry/push/leases.py: renewed by a heartbeat while it works, given back at the
end; a crashed replica's lease runs out within ``limits.upload_lease``, seconds), and renews it once more
right before it commits anything.

A session records the token that opened it (``uploads.opened_by``): its status and its cancel also
serve that token with pull alone (OCI clients reuse one pull token for every ``GET``), never anyone
else who may not push (the URL is not a capability a reader of the repository may use).

Errors: ``HubError`` (``BLOB_UPLOAD_UNKNOWN``, ``BLOB_UPLOAD_INVALID``, ``BLOB_UPLOAD_BUSY``, ``RANGE_INVALID``,
``DIGEST_INVALID``, ``NAME_INVALID``, ``NAME_UNKNOWN``), ``Unauthorized``/``Forbidden`` (``Unauthorized``
``insufficient_scope`` for a mount whose registry token cannot read its source but whose API token
could), storage errors.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass

import anyio

from hub_server.auth.errors import Unauthorized
from hub_server.auth.scopes import repository_scope
from hub_server.db.models import Blob, RepositoryBlob, Upload
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.blobs import digest_object, publish_blob
from hub_server.registry.content.quotas import check_storage
from hub_server.registry.core.access import (
    RepositoryScope,
    can_read,
    find_repository,
    mount_source_scope,
    readable_linking,
)
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_digest, check_repository, parse_digest
from hub_server.registry.core.paths import session_pack_key, upload_key
from hub_server.registry.core.sql import insert_ignore
from hub_server.registry.push.leases import Lease, UploadLeases
from hub_server.registry.push.packs import Recipe, ingest_recipe, keep_frames, parse_recipe
from hub_server.registry.push.upload_verify import (
    FrameStream,
    declare,
    declared_row,
    declared_stream,
    matches,
    save_state,
)
from hub_server.storage import BlobInfo, BlobNotFound, BlobWriter

__all__ = ["BlobCommitted", "UploadService", "UploadStatus"]


@dataclass(frozen=True)
class UploadStatus:
    """An open session: ``size`` bytes are committed (resume from there)."""

    id: str
    repository: str
    size: int


@dataclass(frozen=True)
class BlobCommitted:
    """A blob now stored and linked to ``repository``."""

    digest: str
    repository: str
    size: int


class UploadService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx
        self.leases = UploadLeases(ctx)

    # -- public operations ---------------------------------------------------------------

    async def start(
        self,
        scope: RepositoryScope,
        *,
        digest: str | None = None,
        body: AsyncIterator[bytes] | None = None,
        mount: str | None = None,
        mount_from: str | None = None,
    ) -> UploadStatus | BlobCommitted:
        """Open a session in the repository of ``scope`` (``push``); with ``digest`` upload ``body``
        monolithically; with ``mount`` link an existing blob from ``mount_from``, or without it from any
        repository holding it, if the caller may read that repository (else open a session).

        Creates the repository (private) on the first write.
        """
        if mount is not None:
            mounted = await self._mount(scope, check_digest(mount), mount_from)
            if mounted is not None:
                return mounted
        if digest is not None:
            digest = check_digest(digest)
        async with self.ctx.sessions() as session:
            repo = await scope.created(session, limit=self.ctx.limits.repositories_per_namespace)
            await check_storage(session, self.ctx, scope.namespace)  # at or over its quota: no new upload
            upload_id = str(uuid.uuid4())
            await self.ctx.store.put(upload_key(upload_id), b"")
            now = self.ctx.clock()
            session.add(
                Upload(
                    id=upload_id,
                    repository_id=repo.id,  # type: ignore[arg-type]  # typing debt, decisions/0008
                    size=0,
                    created_at=now,
                    updated_at=now,
                    opened_by=scope.principal.name,
                )
            )
            await session.commit()
        if digest is None:
            return UploadStatus(upload_id, repo.full_name, 0)
        if scope.repository is None:  # the session's checks need the repository it created
            scope = scope.with_repository(repo)
        try:
            return await self.finish(scope, upload_id, digest, body)
        except BaseException:
            # The client never learnt this session's id: nothing may outlive the failed request.
            with anyio.CancelScope(shield=True):
                await self._drop(upload_id)
            raise

    async def status(self, scope: RepositoryScope, upload_id: str) -> UploadStatus:
        """How many bytes the session holds (``scope``: ``push``, or ``upload`` for the session's opener).

        Raises: HubError(BLOB_UPLOAD_UNKNOWN) (also for a session another token opened, to a caller who
        may not push), Forbidden ``insufficient_scope`` (a registry token whose API token may push).
        """
        await self._session(scope, upload_id, opener_may=True)
        return UploadStatus(upload_id, scope.full_name, await self._size(upload_id))

    async def append(
        self,
        scope: RepositoryScope,
        upload_id: str,
        body: AsyncIterator[bytes],
        content_range: tuple[int, int] | None = None,
    ) -> UploadStatus:
        """Append ``body``. ``content_range`` (inclusive ``start, end``) must start at the committed size.

        Raises: HubError(RANGE_INVALID) with ``detail.size`` when it does not, HubError(BLOB_UPLOAD_INVALID)
        when the body length differs from the range or the blob would exceed the size limit.
        """
        upload = await self._session(scope, upload_id)
        async with self.leases.hold(upload_id) as lease:
            size = await self._append(upload, body, content_range, lease)
        return UploadStatus(upload_id, scope.full_name, size)

    async def finish(
        self,
        scope: RepositoryScope,
        upload_id: str,
        digest: str,
        body: AsyncIterator[bytes] | None = None,
        content_range: tuple[int, int] | None = None,
    ) -> BlobCommitted:
        """Append the optional ``body`` (at ``content_range`` when given, as :meth:`append`), verify the
        whole upload hashes to ``digest``, publish and link it.

        Raises: HubError(DIGEST_INVALID) on a mismatch (the session and its bytes are deleted);
        HubError(RANGE_INVALID) with ``detail.size`` when ``content_range`` does not start at the
        committed size (the session is kept, unchanged).
        """
        want = parse_digest(digest)
        upload = await self._session(scope, upload_id)
        key = upload_key(upload_id)
        async with self.leases.hold(upload_id) as lease:
            if body is not None:
                await self._append(upload, body, content_range, lease)
            got, size = await digest_object(self.ctx.store, key, want.algorithm)
            await self.leases.renew(lease)  # still ours: nobody took the session over while it was hashed
            if got != want:
                await self._drop(upload_id)
                raise HubError(
                    ErrorCode.DIGEST_INVALID,
                    f"uploaded bytes hash to {got}, not {want}; the upload was discarded",
                    {"expected": str(want), "actual": str(got), "size": size},
                )
            async with self.ctx.sessions() as session:
                try:
                    await check_storage(session, self.ctx, scope.namespace, adding=size, blob=str(want))
                except HubError:
                    await self._drop(upload_id)
                    raise
                row = await session.get(Upload, upload_id)
                if row is not None:
                    await session.delete(row)
                await publish_blob(self.ctx, session, key, str(want), size, scope.id)
        return BlobCommitted(str(want), scope.full_name, size)

    async def finish_recipe(self, scope: RepositoryScope, upload_id: str, recipe: object) -> BlobCommitted:
        """Finish a session holding the new frames of a data blob, given the blob's recipe: the hub
        rebuilds and verifies the blob and keeps its frames once, in a pack (registry/push/packs.py).

        Raises: HubError(BLOB_UPLOAD_INVALID, DIGEST_INVALID) (the session and its bytes are deleted),
        HubError(BLOB_UPLOAD_UNKNOWN).
        """
        parsed = parse_recipe(recipe, self.ctx.limits.blob_bytes)
        await self._session(scope, upload_id)
        async with self.leases.hold(upload_id) as lease:
            try:
                async with self.ctx.sessions() as session:
                    await check_storage(session, self.ctx, scope.namespace, adding=parsed.size, blob=parsed.digest)
                declared = await declared_stream(self.ctx, upload_id, await self._size(upload_id))
                if declared is not None and not matches(declared[0], parsed):
                    raise HubError(
                        ErrorCode.BLOB_UPLOAD_INVALID,
                        "the recipe differs from the one declared for this upload; the upload was discarded",
                        {"uuid": upload_id},
                    )
                if declared is not None and declared[1] is not None:  # verified as it streamed in
                    await declared[1].finish(parsed)
                    await self.leases.renew(lease)
                    await keep_frames(self.ctx, scope.id, upload_id, parsed)
                else:
                    await ingest_recipe(self.ctx, scope.principal, scope.id, upload_id, parsed)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._drop(upload_id)  # the session and its bytes go
                raise
            with anyio.CancelScope(shield=True):
                await self._drop(upload_id, keep_pack=True)  # the session's bytes are a pack now
        return BlobCommitted(parsed.digest, scope.full_name, parsed.size)

    async def declare_recipe(self, scope: RepositoryScope, upload_id: str, recipe: object) -> UploadStatus:
        """Declare the recipe of the data blob whose new frames the session will hold, before they are
        uploaded: each PATCH then verifies the frames it carries (registry/push/upload_verify.py).

        Raises: HubError(BLOB_UPLOAD_INVALID) for a malformed recipe, one differing from the recipe
        declared already, a session holding bytes already, or held frames not readable or not matching
        (the session and its bytes are deleted); HubError(BLOB_UPLOAD_UNKNOWN).
        """
        await self._session(scope, upload_id)
        async with self.leases.hold(upload_id):
            try:
                # a whole recipe tells the blob's size before its frames are sent: over quota, it stops here (a
                # recipe declared in parts is checked when it is finished)
                whole = _whole_recipe(recipe, self.ctx.limits.blob_bytes)
                if whole is not None:
                    async with self.ctx.sessions() as session:
                        await check_storage(session, self.ctx, scope.namespace, adding=whole.size, blob=whole.digest)
                await declare(self.ctx, scope.principal, upload_id, recipe, await self._size(upload_id))
            except HubError:
                with anyio.CancelScope(shield=True):
                    await self._drop(upload_id)
                raise
        return UploadStatus(upload_id, scope.full_name, await self._size(upload_id))

    async def cancel(self, scope: RepositoryScope, upload_id: str) -> None:
        """Delete the session and its staged bytes (``scope``: as for :meth:`status`). Raises: as :meth:`status`."""
        await self._session(scope, upload_id, opener_may=True)
        async with self.leases.hold(upload_id):
            await self._drop(upload_id)

    # -- helpers ---------------------------------------------------------------------------

    async def _mount(self, scope: RepositoryScope, digest: str, source: str | None) -> BlobCommitted | None:
        principal = scope.principal
        src_ns, _, src_name = (source or "").partition("/")
        wanted = mount_source_scope(source)
        if source and wanted and not principal.can("pull", source) and principal.could("pull", source):
            # A registry token for the target only, whose API token may read the source: a challenge naming
            # both, so that the client's next token mounts. 401 (as distribution answers), not the 403 of other
            # missing scopes: the clients that get here (the conformance suite, docker) re-ask only after a 401;
            # skopeo, podman and crane ask for the source's pull up front, and oras-py does not mount.
            raise Unauthorized(
                f"this token's scope does not include pull access to {source!r}, the mount's source; "
                "request a token with it",
                "insufficient_scope",
                f"{repository_scope(scope.full_name, 'push')} {wanted}",
            )
        async with self.ctx.sessions() as session:
            repo = await scope.created(session, limit=self.ctx.limits.repositories_per_namespace)
            if source is None:  # no ``from``: any repository the caller may read that holds it
                if not await readable_linking(session, principal, blobs=[digest]):
                    return None
            else:
                if not src_ns or not src_name:
                    return None
                check_repository(src_ns, src_name)
                src = await find_repository(session, src_ns, src_name)
                if src is None or not can_read(principal, src):
                    return None
                if await session.get(RepositoryBlob, (src.id, digest)) is None:
                    return None
            blob = await session.get(Blob, digest)
            if blob is None:
                return None
            await check_storage(session, self.ctx, scope.namespace, adding=blob.size, blob=digest)
            await insert_ignore(
                session,
                RepositoryBlob,
                [{"repository_id": repo.id, "blob_digest": digest, "created_at": self.ctx.clock()}],
            )
            await session.commit()
        return BlobCommitted(digest, repo.full_name, blob.size)

    async def _session(self, scope: RepositoryScope, upload_id: str, *, opener_may: bool = False) -> Upload:
        """The open upload ``upload_id`` of the repository of ``scope``. A caller who may not push there gets
        it only with ``opener_may`` (a status read or a cancel) and when its token opened the session.

        Raises: HubError(NAME_UNKNOWN) for a missing repository, HubError(BLOB_UPLOAD_UNKNOWN) (also for
        someone else's session), Forbidden ``insufficient_scope`` (that, to a registry token whose API token
        may push: the client asks for push and comes back).
        """
        repo_id = scope.id
        async with self.ctx.sessions() as session:
            upload = await session.get(Upload, upload_id) if _valid_id(upload_id) else None
        expired = upload is not None and self.ctx.clock() - upload.updated_at > self.ctx.limits.upload_lifetime
        unknown = HubError(
            ErrorCode.BLOB_UPLOAD_UNKNOWN, f"upload {upload_id[:64]!r} is unknown or expired", {"uuid": upload_id[:64]}
        )
        if upload is None or upload.repository_id != repo_id or expired:
            raise unknown
        principal = scope.principal
        if not principal.can("push", scope.full_name) and not (
            opener_may and upload.opened_by is not None and upload.opened_by == principal.name
        ):
            if principal.could("push", scope.full_name):
                raise principal.insufficient_scope("push", scope.full_name)
            raise unknown  # a reader never learns about someone else's upload
        return upload

    async def _size(self, upload_id: str) -> int:
        try:
            return (await self.ctx.store.stat(upload_key(upload_id))).size
        except BlobNotFound:
            raise HubError(
                ErrorCode.BLOB_UPLOAD_UNKNOWN, f"upload {upload_id} has no staged data", {"uuid": upload_id}
            ) from None

    async def _append(
        self, upload: Upload, body: AsyncIterator[bytes], content_range: tuple[int, int] | None, lease: Lease
    ) -> int:
        state = await declared_row(self.ctx, upload.id)
        try:
            writer = await self.ctx.store.writer(upload_key(upload.id), append=True)
        except BlobNotFound:
            raise HubError(
                ErrorCode.BLOB_UPLOAD_UNKNOWN, f"upload {upload.id} has no staged data", {"uuid": upload.id}
            ) from None
        async with writer:
            start = writer.size
            if content_range is not None and content_range[0] != start:
                raise HubError(
                    ErrorCode.RANGE_INVALID,
                    f"Content-Range starts at {content_range[0]}, the upload holds {start} bytes",
                    {"uuid": upload.id, "size": start},
                )
            declared = await declared_stream(self.ctx, upload.id, start, state) if state is not None else None
            stream = declared[1] if declared is not None else None
            try:
                info = await self._receive(upload, body, content_range, lease, writer, stream)
            except HubError:
                if stream is not None and stream.failed:  # a lying frame: nothing of the session is kept
                    with anyio.CancelScope(shield=True):
                        await writer.cancel()
                        await self._drop(upload.id)
                raise
            finally:
                if stream is not None:
                    await stream.close()
        async with self.ctx.sessions() as session:
            row = await session.get(Upload, upload.id)
            if row is not None:
                row.size = info.size
                row.updated_at = self.ctx.clock()
                session.add(row)
                if stream is not None:
                    await save_state(session, upload.id, stream)
                await session.commit()
        return info.size

    async def _receive(
        self,
        upload: Upload,
        body: AsyncIterator[bytes],
        content_range: tuple[int, int] | None,
        lease: Lease,
        writer: BlobWriter,
        stream: FrameStream | None,
    ) -> BlobInfo:
        """Write ``body`` (verifying it through ``stream`` when a recipe was declared) and commit it."""
        limit = self.ctx.limits.blob_bytes
        start = writer.size
        async for piece in body:
            lease.check()  # taken over (this request stalled past its lease): write nothing more
            if writer.size + len(piece) > limit:
                raise HubError(
                    ErrorCode.BLOB_UPLOAD_INVALID,
                    f"upload exceeds the blob size limit of {limit} bytes",
                    {"uuid": upload.id, "limit": limit},
                )
            await writer.write(piece)
            if stream is not None:
                await stream.feed(piece)
        if content_range is not None and writer.size - start != content_range[1] - content_range[0] + 1:
            raise HubError(
                ErrorCode.BLOB_UPLOAD_INVALID,
                f"Content-Range {content_range[0]}-{content_range[1]} announces "
                f"{content_range[1] - content_range[0] + 1} bytes, the body had {writer.size - start}",
                {"uuid": upload.id, "size": start},
            )
        if stream is not None:
            await stream.settle()
        await self.leases.renew(lease)  # the fence: commit only while the session is still this request's
        return await writer.commit()

    async def _drop(self, upload_id: str, *, keep_pack: bool = False) -> None:
        """Delete the session and its staged bytes (but the pack they became, with ``keep_pack``)."""
        for key in (upload_key(upload_id),) if keep_pack else (upload_key(upload_id), session_pack_key(upload_id)):
            with suppress(BlobNotFound):
                await self.ctx.store.delete(key)
        async with self.ctx.sessions() as session:
            row = await session.get(Upload, upload_id)
            if row is not None:
                await session.delete(row)
                await session.commit()


def _valid_id(upload_id: str) -> bool:
    try:
        return str(uuid.UUID(upload_id)) == upload_id
    except ValueError:
        return False


def _whole_recipe(recipe: object, limit: int) -> Recipe | None:
    """The parsed recipe when ``recipe`` is a whole one, else None (a part of one declared in parts)."""
    try:
        return parse_recipe(recipe, limit)
    except HubError:
        return None
