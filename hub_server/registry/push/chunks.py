"""Frame negotiation: which zstd frames the hub already holds where the caller may read them.

A pusher (format v2) builds its data blobs first — they are a pure function of the layer — then
sends the blake3 digests of their frames; the answer lists those stored in a data blob linked to
a repository the caller may read (``{ns}/{repo}`` or any other), which the pusher then leaves
out of its upload and marks as held in the blob's recipe (registry/push/packs.py). Frames held only
in repositories the caller cannot read are reported as missing: dedup never leaks, and
uploading them anyway is accepted and stored once.

Who may ask is the ``negotiate`` access of ``core/access.py`` (a pusher, or a reader of the repository).

Errors: ``HubError`` (``TOO_LARGE`` over the per-request limit, ``DIGEST_INVALID``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_digest
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

    async def query(self, scope: RepositoryScope, digests: list[str]) -> FrameQueryResult:
        """Which frames among ``digests`` (≤ ``limits.chunks_per_query``) the caller of ``scope`` (a
        ``negotiate`` scope: may push, or read, the repository) can reference without uploading them.

        Raises: HubError(TOO_LARGE, DIGEST_INVALID).
        """
        limit = self.ctx.limits.chunks_per_query
        if len(digests) > limit:
            raise HubError(
                ErrorCode.TOO_LARGE,
                f"{len(digests)} digests in one query, the limit is {limit}",
                {"limit": limit, "size": len(digests)},
            )
        wanted = list(dict.fromkeys(check_digest(d) for d in digests))
        async with self.ctx.sessions() as session:
            frames = await readable_frames(session, scope.principal, wanted)
        found = {d: FoundFrame(f.length, f.chunk_digest) for d, f in frames.items()}
        return FrameQueryResult(found, len(wanted) - len(found))
