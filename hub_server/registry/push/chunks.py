"""Frame negotiation: which zstd frames the hub already holds where the caller may read them.

A pusher (format v2) builds its data blobs first — they are a pure function of the layer — then
sends the blake3 digests of their frames; the answer lists those stored in a data blob linked to
a repository the caller may read (``{ns}/{repo}`` or any other), which the pusher then leaves
out of its upload and marks as held in the blob's recipe (registry/push/packs.py). Frames held only
in repositories the caller cannot read are reported as missing: dedup never leaks, and
uploading them anyway is accepted and stored once.

Errors: ``HubError`` (``TOO_LARGE`` over the per-request limit, ``DIGEST_INVALID``,
``NAME_INVALID``), ``Unauthorized``/``Forbidden``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import can_read, find_repository
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_digest, check_repository
from hub_server.registry.push.packs import readable_frames

__all__ = ["ChunkService", "FoundFrame", "FrameQueryResult"]


@dataclass(frozen=True)
class FoundFrame:
    length: int
    chunk: str


@dataclass(frozen=True)
class FrameQueryResult:
    found: dict[str, FoundFrame]
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

    async def query(self, principal: Principal, namespace: str, name: str, digests: list[str]) -> FrameQueryResult:
        """Which frames among ``digests`` (≤ ``limits.chunks_per_query``) a caller who may read or push
        ``namespace/name`` can reference without uploading them."""
        full = check_repository(namespace, name)
        limit = self.ctx.limits.chunks_per_query
        if len(digests) > limit:
            raise HubError(
                ErrorCode.TOO_LARGE,
                f"{len(digests)} digests in one query, the limit is {limit}",
                {"limit": limit, "size": len(digests)},
            )
        wanted = list(dict.fromkeys(check_digest(d) for d in digests))
        async with self.ctx.sessions() as session:
            repo = await find_repository(session, namespace, name)
            # A pusher may ask before its repository exists; anyone else needs to read it. The
            # refusal depends only on the caller's scopes (401 anonymous, 403 token), never on
            # whether the repository exists, so it leaks nothing and tells a pusher what is wrong.
            if not principal.can("push", full) and (repo is None or not can_read(principal, repo)):
                principal.require("push", full)
            frames = await readable_frames(session, principal, wanted)
        found = {d: FoundFrame(f.length, f.chunk_digest) for d, f in frames.items()}
        return FrameQueryResult(found, len(wanted) - len(found))
