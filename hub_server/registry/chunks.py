"""Chunk negotiation: which chunks the hub already holds where the caller may read them.

A pusher sends the digests of its changed chunks; the answer maps each one the hub holds in a
data blob linked to a repository the caller may read (``{ns}/{repo}`` or any other) to that
frame's location, so the pusher references it instead of uploading it. Chunks held only in
repositories the caller cannot read are reported as missing: dedup never leaks.

Errors: ``HubError`` (``TOO_LARGE`` over the per-request limit, ``DIGEST_INVALID``,
``NAME_INVALID``, ``NAME_UNKNOWN``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import col, select

from hub_server.auth.scopes import Principal
from hub_server.db.models import Blob, Chunk, Repository, RepositoryBlob
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.access import can_read, find_repository
from hub_server.registry.context import RegistryContext
from hub_server.registry.names import check_digest, check_repository
from hub_server.registry.sql import batched

__all__ = ["ChunkLocation", "ChunkQueryResult", "ChunkService"]


@dataclass(frozen=True)
class ChunkLocation:
    blob: str
    offset: int
    length: int
    blob_size: int
    """Size of the data blob: what the pusher's manifest descriptor for it must declare."""
    repository: str
    """A repository the caller may read that links the blob (to mount from, or fetch through)."""


@dataclass(frozen=True)
class ChunkQueryResult:
    found: dict[str, ChunkLocation]
    missing: int


class ChunkService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def authorize(self, principal: Principal, namespace: str, name: str) -> None:
        """Check that the caller may query ``namespace/name`` (before its request body is parsed).

        Raises: ``NAME_INVALID``; Unauthorized / Forbidden (as :meth:`query` would).
        """
        full = check_repository(namespace, name)
        async with self.ctx.sessions() as session:
            repo = await find_repository(session, namespace, name)
            if not principal.can("push", full) and (repo is None or not can_read(principal, repo)):
                principal.require("push", full)

    async def query(self, principal: Principal, namespace: str, name: str, digests: list[str]) -> ChunkQueryResult:
        """Locate ``digests`` (≤ ``limits.chunks_per_query``) for a caller who may read or push ``namespace/name``."""
        full = check_repository(namespace, name)
        limit = self.ctx.limits.chunks_per_query
        if len(digests) > limit:
            raise HubError(ErrorCode.TOO_LARGE, f"{len(digests)} digests in one query, the limit is {limit}",
                           {"limit": limit, "size": len(digests)})
        wanted = list(dict.fromkeys(check_digest(d) for d in digests))
        found: dict[str, ChunkLocation] = {}
        readable: dict[int, bool] = {}
        async with self.ctx.sessions() as session:
            repo = await find_repository(session, namespace, name)
            # A pusher may ask before its repository exists; anyone else needs to read it. The
            # refusal depends only on the caller's scopes (401 anonymous, 403 token), never on
            # whether the repository exists, so it leaks nothing and tells a pusher what is wrong.
            if not principal.can("push", full) and (repo is None or not can_read(principal, repo)):
                principal.require("push", full)
            for batch in batched(wanted):
                rows = await session.exec(
                    select(Chunk, Repository, Blob.size)
                    .join(Blob, Blob.digest == Chunk.blob_digest)  # type: ignore[arg-type]
                    .join(RepositoryBlob, RepositoryBlob.blob_digest == Chunk.blob_digest)  # type: ignore[arg-type]
                    .join(Repository, Repository.id == RepositoryBlob.repository_id)  # type: ignore[arg-type]
                    .where(col(Chunk.digest).in_(batch))
                    # Prefer the caller's repository, then stable order, so answers are reproducible.
                    .order_by(col(Chunk.digest), (Repository.id != (repo.id if repo else -1)), col(Chunk.id))
                )
                for chunk, owner, blob_size in rows.all():
                    if chunk.digest in found:
                        continue
                    if owner.id not in readable:
                        readable[owner.id] = can_read(principal, owner)  # type: ignore[index]
                    if readable[owner.id]:  # type: ignore[index]
                        found[chunk.digest] = ChunkLocation(chunk.blob_digest, chunk.offset, chunk.length,
                                                                   blob_size, owner.full_name)
        return ChunkQueryResult(found, len(wanted) - len(found))
