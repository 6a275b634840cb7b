"""Reading a blob's exact bytes, whether it is stored whole or as a recipe over pack frames.

A data blob pushed natively (format v2, :mod:`registry.packs`) has no object of its own: table
``recipe_frames`` lists its frames in order, end to end, and each frame lives once in a pack
(table ``frames``). :func:`iter_blob_range` streams any byte range of such a blob byte-exact,
reading only the frames the range touches (neighbouring frames of one pack in one read), so
blob GETs, ``Range`` GETs and the native range fetches serve recipes and whole objects alike.

Errors: storage errors (``BlobNotFound`` when a pack or object is missing), ``InvalidRange``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlmodel import col, select

from hub_server.db.models import Blob, Frame, RecipeFrame
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.paths import blob_key
from hub_server.storage import BlobNotFound, InvalidRange

__all__ = ["MAX_FRAME_BYTES", "Segment", "blob_layout", "has_recipe", "iter_blob_range", "read_blob_range", "segments"]

#: The largest frame a recipe may hold (16 MiB chunk, zstd's worst case): bounds the index scan.
MAX_FRAME_BYTES = (16 << 20) + (2 << 20) + 1024


@dataclass(frozen=True, slots=True)
class Segment:
    """``length`` bytes at ``pack_offset`` in ``pack``, which are the blob's bytes at ``offset``."""

    offset: int
    length: int
    pack: str
    pack_offset: int


async def has_recipe(ctx: RegistryContext, digest: str) -> bool:
    """Whether blob ``digest`` is stored as a recipe."""
    async with ctx.sessions() as session:
        row = (await session.exec(select(RecipeFrame.offset).where(RecipeFrame.blob_digest == digest).limit(1))).first()
    return row is not None


async def blob_layout(ctx: RegistryContext, digest: str) -> tuple[int, bool]:
    """``(size, stored as a recipe)`` of a stored blob. Raises BlobNotFound when it has no row."""
    async with ctx.sessions() as session:
        row = await session.get(Blob, digest)
    if row is None:
        raise BlobNotFound(blob_key(digest))
    return row.size, await has_recipe(ctx, digest)


async def segments(ctx: RegistryContext, digest: str, start: int, end: int) -> list[Segment]:
    """The recipe's frames overlapping ``[start, end)``, in order, neighbours in one pack merged."""
    async with ctx.sessions() as session:
        rows = (
            await session.exec(
                select(RecipeFrame.offset, RecipeFrame.length, Frame.pack_key, Frame.pack_offset)
                .join(Frame, Frame.digest == RecipeFrame.frame_digest)  # type: ignore[arg-type]
                .where(
                    RecipeFrame.blob_digest == digest,
                    col(RecipeFrame.offset) < end,
                    col(RecipeFrame.offset) > start - MAX_FRAME_BYTES,
                )
                .order_by(col(RecipeFrame.offset))
            )
        ).all()
    out: list[Segment] = []
    for offset, length, pack, pack_offset in rows:
        if offset + length <= start:
            continue
        last = out[-1] if out else None
        if (
            last is not None
            and last.pack == pack
            and last.offset + last.length == offset
            and last.pack_offset + last.length == pack_offset
        ):
            out[-1] = Segment(last.offset, last.length + length, pack, last.pack_offset)
        else:
            out.append(Segment(offset, length, pack, pack_offset))
    return out


#: Piece size when serving a blob: big enough that per-piece overhead (a thread hop, an ASGI send)
#: is noise next to the copy (bench/oci_copy.py measures the whole-blob path against docker-registry).
SERVE_CHUNK = 4 << 20


async def iter_blob_range(
    ctx: RegistryContext, digest: str, size: int, recipe: bool, offset: int = 0, length: int | None = None
) -> AsyncIterator[bytes]:
    """Stream ``length`` bytes (default: to the end) from ``offset`` of blob ``digest`` (``size`` bytes).

    Raises: InvalidRange outside the blob; BlobNotFound if stored bytes are missing.
    """
    length = size - offset if length is None else length
    if offset < 0 or length < 0 or offset + length > size:
        raise InvalidRange(digest, offset, length, size)
    if not recipe:
        async with ctx.store.open(blob_key(digest), offset, length, chunk_size=SERVE_CHUNK) as stream:
            async for piece in stream:
                yield piece
        return
    end = offset + length
    pos = offset
    for seg in await segments(ctx, digest, offset, end):
        lo, hi = max(pos, seg.offset), min(end, seg.offset + seg.length)
        if lo != pos:  # pragma: no cover - a recipe covers its blob end to end (checked on ingest)
            raise InvalidRange(digest, pos, length, size)
        async with ctx.store.open(
            seg.pack, seg.pack_offset + (lo - seg.offset), hi - lo, chunk_size=SERVE_CHUNK
        ) as stream:
            async for piece in stream:
                yield piece
        pos = hi
    if pos != end:  # pragma: no cover - as above
        raise InvalidRange(digest, pos, length, size)


async def read_blob_range(
    ctx: RegistryContext, digest: str, offset: int, length: int, *, recipe: bool | None = None, size: int | None = None
) -> bytes:
    """``length`` bytes at ``offset`` of blob ``digest`` (a recipe or a whole object) as bytes."""
    if recipe is None:
        recipe = await has_recipe(ctx, digest)
    if size is None:
        size = offset + length  # the caller's range is checked by the store / the recipe
    parts = [piece async for piece in iter_blob_range(ctx, digest, size, recipe, offset, length)]
    return b"".join(parts)
