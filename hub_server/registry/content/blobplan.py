"""Fetch plans: where a recipe blob's bytes live in the object store, as presigned pack ranges.

A data blob pushed natively is a recipe over frames stored once in packs (registry/push/packs.py), so
no single object holds its bytes and a plain 307 cannot send a client to them. A client that
says it understands plans (``Accept: application/vnd.forkd.blob-plan.v1+json``) on a blob GET
gets, instead of the bytes, a small JSON document mapping the ranges it asked for onto byte
ranges of pack objects, each pack with a presigned URL (docs/http-api.md, "Fetch plans"):

.. code-block:: json

    {"mediaType": "application/vnd.forkd.blob-plan.v1+json",
     "digest": "sha256:…", "size": 123456, "expiresIn": 300,
     "sources": ["https://bucket.s3…/packs/ab/ab…?X-Amz-Signature=…"],
     "segments": [[0, 65536, 0, 1048576]]}

Each segment ``[offset, length, source, sourceOffset]`` says: the blob's ``length`` bytes at
``offset`` are the bytes at ``sourceOffset`` of ``sources[source]``. Segments are sorted, do not
overlap, and cover exactly the union of the requested ranges. The client fetches them straight
from the store (coalesced, in parallel) and verifies every chunk as it always does.

Errors: storage errors (``BlobNotFound`` for a missing pack row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hub_server.registry.content.recipes import segments
from hub_server.registry.core.context import RegistryContext
from manifest.mediatypes import BLOB_PLAN

__all__ = ["BLOB_PLAN", "blob_plan", "plan_segments", "wants_plan"]


def wants_plan(accept: str | None) -> bool:
    """Whether an ``Accept`` header lists the fetch-plan media type."""
    if not accept:
        return False
    return any(part.split(";", 1)[0].strip().lower() == BLOB_PLAN for part in accept.split(","))


def _union(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ``(first, last)`` ranges merged into sorted, disjoint half-open ``[start, end)``."""
    out: list[list[int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], last + 1)
        else:
            out.append([first, last + 1])
    return [(a, b) for a, b in out]


async def plan_segments(
    ctx: RegistryContext, digest: str, ranges: Sequence[tuple[int, int]]
) -> tuple[list[str], list[list[int]]]:
    """``(pack keys, segments)`` of recipe blob ``digest`` for inclusive ``ranges``: segments as in
    the plan, their source an index into the pack keys. One query for the frames under the ranges' hull."""
    wanted = _union(ranges)
    stored = await segments(ctx, digest, wanted[0][0], wanted[-1][1]) if wanted else []
    sources: dict[str, int] = {}
    out: list[list[int]] = []
    i = 0
    for start, end in wanted:
        while i < len(stored) and stored[i].offset + stored[i].length <= start:
            i += 1
        j = i
        while j < len(stored) and stored[j].offset < end:
            seg = stored[j]
            lo, hi = max(start, seg.offset), min(end, seg.offset + seg.length)
            source = sources.setdefault(seg.pack, len(sources))
            out.append([lo, hi - lo, source, seg.pack_offset + (lo - seg.offset)])
            j += 1
    return list(sources), out


async def blob_plan(ctx: RegistryContext, digest: str, size: int, ranges: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The fetch plan of recipe blob ``digest`` (``size`` bytes) for inclusive ``ranges``, one presigned
    URL per pack touched (the store signs locally: no request to it).

    Raises: StorageError from presigning.
    """
    packs, out = await plan_segments(ctx, digest, ranges)
    urls = [await ctx.store.redirect_url(pack, expires_in=ctx.redirect_expiry) for pack in packs]
    return {
        "mediaType": BLOB_PLAN,
        "digest": digest,
        "size": size,
        "expiresIn": ctx.redirect_expiry,
        "sources": urls,
        "segments": out,
    }
