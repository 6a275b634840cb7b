"""Blobs: reading them through a repository, hashing stored objects, publishing verified bytes.

A blob is readable through repository R only if ``repository_blobs`` links it to R and the
caller may read R (docs/http-api.md). Publication (:func:`publish_blob`) is the last step of
the staged-upload protocol: the staged object was verified, it moves to its content address,
then the metadata rows are committed.

Errors: ``HubError`` (``NAME_UNKNOWN``, ``BLOB_UNKNOWN``, ``DIGEST_INVALID``), storage errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import Blob, RepositoryBlob
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.blobplan import blob_plan
from hub_server.registry.content.recipes import has_recipe, iter_blob_range
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_digest, parse_digest
from hub_server.registry.core.paths import blob_key
from hub_server.registry.core.sql import insert_ignore
from hub_server.storage import BlobNotFound, BlobStore
from manifest.digest import Digest, Hasher

__all__ = ["BlobRead", "BlobService", "BlobUnlinker", "digest_object", "publish_blob", "read_blob_bytes"]

HASH_READ_SIZE = 4 << 20


async def digest_object(store: BlobStore, key: str, algorithm: str) -> tuple[Digest, int]:
    """Hash the object at ``key``; the hashing runs in worker threads so the event loop keeps serving.

    Raises: BlobNotFound, StorageError.
    """
    hasher = Hasher(algorithm)
    async with store.open(key, chunk_size=HASH_READ_SIZE) as stream:
        async for piece in stream:
            await anyio.to_thread.run_sync(hasher.update, piece)
    return hasher.digest(), hasher.size


async def publish_blob(
    ctx: RegistryContext, session: AsyncSession, staged_key: str, digest: str, size: int, repository_id: int
) -> None:
    """Move verified bytes from ``staged_key`` to the digest's address, then record and link the blob.

    Commits ``session``. If the blob is already stored, the staged copy is dropped instead.
    """
    target = blob_key(digest)
    known = await session.get(Blob, digest)
    if known is not None and await ctx.store.exists(target):
        await ctx.store.delete(staged_key)
    else:
        await ctx.store.move(staged_key, target)
    now = ctx.clock()
    await insert_ignore(session, Blob, [{"digest": digest, "size": size, "media_type": None, "created_at": now}])
    await insert_ignore(
        session, RepositoryBlob, [{"repository_id": repository_id, "blob_digest": digest, "created_at": now}]
    )
    await session.commit()


@dataclass(frozen=True)
class BlobRead:
    """A blob the caller may read, ready to be served (whole, by ranges, or by redirect).
    ``recipe``: stored as frames in packs (registry/content/recipes.py), streamed byte-exact all the same.
    ``plannable``: a recipe whose packs the client may fetch directly (:meth:`plan`)."""

    digest: str
    size: int
    media_type: str | None
    redirect_url: str | None
    _ctx: RegistryContext
    recipe: bool = False
    plannable: bool = False

    async def plan(self, ranges: list[tuple[int, int]]) -> dict[str, Any]:
        """The fetch plan (registry/content/blobplan.py) for inclusive ``ranges`` of a plannable blob."""
        return await blob_plan(self._ctx, self.digest, self.size, ranges)

    async def iter_range(self, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        """Stream ``length`` bytes from ``offset`` (checked against the size by the caller)."""
        async for piece in iter_blob_range(self._ctx, self.digest, self.size, self.recipe, offset, length):
            yield piece


class BlobService:
    """Finding blobs through repositories."""

    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def read(self, scope: RepositoryScope, digest: str, *, redirect: bool = False) -> BlobRead:
        """The blob ``digest`` as linked to the repository of ``scope`` (a ``pull`` scope).

        ``redirect`` asks for a presigned URL when the store can make one (blob GET).

        Raises: HubError(DIGEST_INVALID, BLOB_UNKNOWN).
        """
        parsed = parse_digest(digest)
        digest = str(parsed)
        repo = scope.existing()
        async with self.ctx.sessions() as session:
            row = (
                await session.exec(
                    select(Blob)
                    .join(RepositoryBlob, RepositoryBlob.blob_digest == Blob.digest)  # type: ignore[arg-type]
                    .where(RepositoryBlob.repository_id == repo.id, Blob.digest == digest)
                )
            ).first()
        if row is None:
            raise HubError(
                ErrorCode.BLOB_UNKNOWN,
                f"blob {digest} is not in {repo.full_name}",
                {"digest": digest, "name": repo.full_name},
            )
        url = None
        store = self.ctx.store
        recipe = await has_recipe(self.ctx, digest)
        direct = redirect and self.ctx.blob_redirects and store.capabilities.supports_redirect
        if direct and not recipe:
            url = await store.redirect_url(blob_key(parsed), expires_in=self.ctx.redirect_expiry)
        return BlobRead(digest, row.size, row.media_type, url, self.ctx, recipe, plannable=direct and recipe)


class BlobUnlinker:
    """``DELETE /v2/{ns}/{repo}/blobs/{digest}``: the blob leaves the repository; GC reclaims its bytes
    once nothing references it (a manifest listing it keeps it stored)."""

    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def unlink(self, scope: RepositoryScope, digest: str, remote: str | None = None) -> None:
        """Remove ``digest``'s link to the repository of ``scope`` (a ``delete`` scope).

        Raises: HubError(DIGEST_INVALID, BLOB_UNKNOWN).
        """
        digest = check_digest(digest)
        full = scope.full_name
        async with self.ctx.sessions() as session:
            link = await session.get(RepositoryBlob, (scope.id, digest))
            if link is None:
                raise HubError(
                    ErrorCode.BLOB_UNKNOWN, f"blob {digest} is not in {full}", {"digest": digest, "name": full}
                )
            await session.delete(link)
            await session.commit()
        await self.ctx.audit.record(
            scope.principal.actor, "delete", repository=full, digest=digest, remote=remote, detail={"blob": True}
        )


async def read_blob_bytes(ctx: RegistryContext, digest: str, limit: int, what: str) -> bytes:
    """The whole stored blob ``digest`` if it is at most ``limit`` bytes (for configs, chunk maps, manifests).

    Raises: HubError(MANIFEST_INVALID) if it is larger, HubError(MANIFEST_BLOB_UNKNOWN) if missing.
    """
    key = blob_key(digest)
    try:
        info = await ctx.store.stat(key)
        if info.size > limit:
            raise HubError(
                ErrorCode.MANIFEST_INVALID,
                f"{what} {digest} is {info.size} bytes, over the {limit}-byte limit",
                {"digest": digest, "limit": limit},
            )
        return await ctx.store.read(key)
    except BlobNotFound:
        raise HubError(
            ErrorCode.MANIFEST_BLOB_UNKNOWN, f"{what} {digest} is missing from storage", {"blobs": [digest]}
        ) from None
