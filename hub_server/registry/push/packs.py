"""Data blobs pushed as recipes: frames stored once, in packs, below the OCI graph.

A format-v2 data blob is a pure function of its layer (manifest/layer.py), so two layers
sharing chunks have different blobs holding the same frames. The native push sends only the
frames the hub lacks: it uploads them end to end into an ordinary upload session, then
finishes the session with a **recipe** — the blob's frames in order, each marked as uploaded
(``inline``) or as one the hub already holds (negotiated through ``frames/query``, only
against repositories the pusher may read). :func:`ingest_recipe` then:

1. checks the recipe's shape and that every frame not uploaded is stored and readable by the
   pusher (the same refusal whether it is unknown or private: nothing leaks);
2. streams the blob in order — uploaded frames from the session, the others from their packs —
   checking each uploaded frame's blake3 and that it decompresses to its chunk (digest and
   length), and hashing the whole blob, which must have the declared size and sha256;
3. keeps the new frames once: the session's bytes become the pack as they are, or, when the
   pusher uploaded frames the hub already had (it need not say why), a pack of only the new
   ones is written and the duplicates are dropped silently;
4. commits in one transaction: the pack, its frames, the blob, its recipe, its verified chunk
   locations (so a manifest push does not re-read them) and the blob's link to the repository.

Errors: ``HubError`` (``BLOB_UPLOAD_INVALID`` for a malformed recipe, a frame neither uploaded
nor readable, or session bytes left over; ``DIGEST_INVALID`` for a frame or blob that does
not match), storage errors. On any error the session and its bytes are deleted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Blob, Chunk, Frame, Pack, RecipeFrame, RepositoryBlob
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.recipes import MAX_FRAME_BYTES
from hub_server.registry.core.access import readable_linking
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.paths import session_pack_key, upload_key
from hub_server.registry.core.sql import batched, insert_ignore
from hub_server.registry.push.framecheck import RecipeFrameSpec, check_frames
from hub_server.storage import BlobStore
from manifest import mediatypes as mt
from manifest.chunking import MAX_CHUNK_SIZE
from manifest.digest import Hasher, is_digest

__all__ = [
    "Recipe",
    "RecipeFrameSpec",
    "bad_upload",
    "check_frames",
    "check_held",
    "ingest_recipe",
    "keep_frames",
    "parse_frames",
    "parse_recipe",
    "readable_frames",
]

#: Bytes of the blob handed to a worker thread at a time (frame checks and the sha256).
_BATCH = 8 << 20


@dataclass(frozen=True)
class Recipe:
    digest: str
    size: int
    frames: tuple[RecipeFrameSpec, ...]


def bad_upload(message: str, **detail: Any) -> HubError:
    return HubError(ErrorCode.BLOB_UPLOAD_INVALID, message, detail)


def parse_recipe(obj: Any, max_size: int) -> Recipe:
    """Validate a recipe document (docs/http-api.md). Raises HubError(BLOB_UPLOAD_INVALID) naming the field."""
    if not isinstance(obj, dict) or obj.get("mediaType") != mt.RECIPE:
        raise bad_upload(f"a recipe must be a JSON object with mediaType {mt.RECIPE!r}", field="mediaType")
    digest, size, frames = obj.get("digest"), obj.get("size"), obj.get("frames")
    if not isinstance(digest, str) or not digest.startswith("sha256:") or not is_digest(digest):
        raise bad_upload("recipe.digest must be a sha256 digest", field="digest")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= max_size:
        raise bad_upload(f"recipe.size must be a positive byte count of at most {max_size}", field="size")
    out = parse_frames(frames)
    total = sum(f.length for f in out)
    if total != size:
        raise bad_upload(f"the recipe's frames add up to {total} bytes, recipe.size says {size}", field="size")
    return Recipe(digest, size, out)


def parse_frames(frames: Any, first: int = 0) -> tuple[RecipeFrameSpec, ...]:
    """Validate a recipe's ``frames`` list (numbered from ``first`` in messages). Raises
    HubError(BLOB_UPLOAD_INVALID) naming the field."""
    if not isinstance(frames, list) or not frames:
        raise bad_upload("recipe.frames must be a non-empty list", field="frames")
    out: list[RecipeFrameSpec] = []
    for i, item in enumerate(frames, first):
        where = f"recipe.frames[{i}]"
        if not isinstance(item, list) or len(item) != 5:
            raise bad_upload(f"{where} must be [frameDigest, chunkDigest, rawLength, length, inline]", field=where)
        fd, cd, raw, length, inline = item
        if not all(isinstance(d, str) and d.startswith("blake3:") and is_digest(d) for d in (fd, cd)):
            raise bad_upload(f"{where}: frame and chunk digests must be blake3 digests", field=where)
        if not (isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_CHUNK_SIZE):
            raise bad_upload(f"{where}: rawLength must be in [1, {MAX_CHUNK_SIZE}]", field=where)
        if not (isinstance(length, int) and not isinstance(length, bool) and 0 < length <= MAX_FRAME_BYTES):
            raise bad_upload(f"{where}: length must be in [1, {MAX_FRAME_BYTES}]", field=where)
        if not isinstance(inline, bool):
            raise bad_upload(f"{where}: inline must be true or false", field=where)
        out.append(RecipeFrameSpec(fd, cd, raw, length, inline))
    return tuple(out)


async def readable_frames(session: AsyncSession, principal: Principal, digests: Sequence[str]) -> dict[str, Frame]:
    """The frames among ``digests`` stored in a data blob of a repository ``principal`` may read."""
    holders: dict[str, set[str]] = {}
    for batch in batched(sorted(set(digests))):
        rows = await session.exec(
            select(RecipeFrame.frame_digest, RecipeFrame.blob_digest).where(col(RecipeFrame.frame_digest).in_(batch))
        )
        for frame, blob in rows.all():
            holders.setdefault(frame, set()).add(blob)
    readable = await readable_linking(session, principal, blobs=sorted({b for bs in holders.values() for b in bs}))
    wanted = [f for f, blobs in holders.items() if blobs & set(readable)]
    found: dict[str, Frame] = {}
    for batch in batched(wanted):
        found.update(
            (f.digest, f) for f in (await session.exec(select(Frame).where(col(Frame.digest).in_(batch)))).all()
        )
    return found


async def check_held(session: AsyncSession, principal: Principal, recipe: Recipe) -> dict[str, Frame]:
    """The stored frames the recipe does not upload, each readable by ``principal`` and matching its
    entry. Raises: HubError(BLOB_UPLOAD_INVALID) naming the frames that are not, or the first mismatch."""
    referenced = [f.digest for f in recipe.frames if not f.inline]
    readable = await readable_frames(session, principal, referenced)
    missing = sorted({d for d in referenced if d not in readable})
    if missing:
        raise bad_upload(
            f"{len(missing)} frame(s) of the recipe were neither uploaded nor found in a repository you "
            "may read; upload them inline",
            frames=missing[:50],
        )
    for index, spec in enumerate(recipe.frames):
        if spec.inline:
            continue
        frame = readable[spec.digest]
        if frame.length != spec.length or frame.raw_length != spec.raw_length or frame.chunk_digest != spec.chunk:
            raise bad_upload(
                f"recipe frame {index} ({spec.digest}) does not match the stored frame's lengths or chunk",
                frame=index,
            )
    return readable


async def _stored_frames(session: AsyncSession, digests: Sequence[str]) -> set[str]:
    known: set[str] = set()
    for batch in batched(sorted(set(digests))):
        known.update((await session.exec(select(Frame.digest).where(col(Frame.digest).in_(batch)))).all())
    return known


class _Sequential:
    """Reads exact byte counts, in order, from a stored object."""

    def __init__(self, store: BlobStore, key: str) -> None:
        self._store, self._key = store, key
        self._stream: Any = None
        self._iter: AsyncIterator[bytes] | None = None
        self._buffer = bytearray()

    async def __aenter__(self) -> _Sequential:
        self._stream = self._store.open(self._key)
        opened = await self._stream.__aenter__()
        self._iter = opened.__aiter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.__aexit__(*exc)

    async def read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            try:
                self._buffer += await self._iter.__anext__()  # type: ignore[union-attr]
            except StopAsyncIteration:
                break
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def at_end(self) -> bool:
        return not await self.read(1)


async def ingest_recipe(
    ctx: RegistryContext, principal: Principal, repository_id: int, upload_id: str, recipe: Recipe
) -> None:
    """Rebuild, verify and store the data blob ``recipe`` describes (see the module docstring)."""
    staged = upload_key(upload_id)
    async with ctx.sessions() as session:
        readable = await check_held(session, principal, recipe)
        stored = await _stored_frames(session, [f.digest for f in recipe.frames if f.inline])

    hasher = Hasher("sha256")
    new: dict[str, tuple[int, RecipeFrameSpec]] = {}  # frame digest → (offset in the session's bytes, spec)
    uploaded = 0
    duplicates = False
    batch: list[tuple[RecipeFrameSpec, bytes, int]] = []
    batch_bytes = 0
    async with _Sequential(ctx.store, staged) as session_bytes:
        for index, spec in enumerate(recipe.frames):
            if spec.inline:
                data = await session_bytes.read(spec.length)
                if len(data) != spec.length:
                    raise bad_upload(f"the upload ends inside recipe frame {index}", frame=index, uploaded=uploaded)
                if spec.digest in stored or spec.digest in new:
                    duplicates = True
                else:
                    new[spec.digest] = (uploaded, spec)
                uploaded += spec.length
            else:
                frame = readable[spec.digest]
                data = await ctx.store.read(frame.pack_key, frame.pack_offset, frame.length)
            batch.append((spec, data, index))
            batch_bytes += len(data)
            if batch_bytes >= _BATCH:
                await anyio.to_thread.run_sync(check_frames, hasher, batch)
                batch, batch_bytes = [], 0
        await anyio.to_thread.run_sync(check_frames, hasher, batch)
        if not await session_bytes.at_end():
            raise bad_upload("the upload holds more bytes than the recipe's inline frames", uploaded=uploaded)
    got = str(hasher.digest())
    if got != recipe.digest or hasher.size != recipe.size:
        raise HubError(
            ErrorCode.DIGEST_INVALID,
            f"the blob the recipe describes hashes to {got} ({hasher.size} bytes), not {recipe.digest}",
            {"expected": recipe.digest, "actual": got},
        )

    pack = session_pack_key(upload_id) if new else None
    positions = await _write_pack(ctx.store, staged, pack, new, uploaded, duplicates)
    await _commit(ctx, repository_id, recipe, pack, positions, new)
    ctx.metrics.record_chunks(stored=len(new), deduplicated=len(recipe.frames) - len(new))


async def keep_frames(ctx: RegistryContext, repository_id: int, upload_id: str, recipe: Recipe) -> None:
    """Steps 3 and 4 of :func:`ingest_recipe` for a session whose frames were verified as they
    streamed in (registry/push/upload_verify.py): the positions come from the recipe, no byte is read
    unless the pusher uploaded frames the hub already had (the session's bytes are moved to
    become the pack, as in :func:`ingest_recipe`)."""
    async with ctx.sessions() as session:
        stored = await _stored_frames(session, [f.digest for f in recipe.frames if f.inline])
    new: dict[str, tuple[int, RecipeFrameSpec]] = {}
    uploaded = 0
    duplicates = False
    for spec in recipe.frames:
        if not spec.inline:
            continue
        if spec.digest in stored or spec.digest in new:
            duplicates = True
        else:
            new[spec.digest] = (uploaded, spec)
        uploaded += spec.length
    staged = upload_key(upload_id)
    pack = session_pack_key(upload_id) if new else None
    positions = await _write_pack(ctx.store, staged, pack, new, uploaded, duplicates)
    await _commit(ctx, repository_id, recipe, pack, positions, new)
    ctx.metrics.record_chunks(stored=len(new), deduplicated=len(recipe.frames) - len(new))


async def _write_pack(
    store: BlobStore,
    staged: str,
    pack: str | None,
    new: dict[str, tuple[int, RecipeFrameSpec]],
    uploaded: int,
    duplicates: bool,
) -> dict[str, int]:
    """Make the new frames a pack; return frame digest → offset in the pack."""
    if pack is None:
        await store.delete(staged)
        return {}
    if not duplicates:  # the session's bytes are exactly the new frames, in order: they become the pack
        await store.move(staged, pack)
        return {d: at for d, (at, _) in new.items()}
    positions: dict[str, int] = {}
    async with store.writer(pack) as writer:
        for digest, (at, spec) in sorted(new.items(), key=lambda item: item[1][0]):
            positions[digest] = writer.size
            await writer.write(await store.read(staged, at, spec.length))
        await writer.commit()
    await store.delete(staged)
    return positions


async def _commit(
    ctx: RegistryContext,
    repository_id: int,
    recipe: Recipe,
    pack: str | None,
    positions: dict[str, int],
    new: dict[str, tuple[int, RecipeFrameSpec]],
) -> None:
    now = ctx.clock()
    async with ctx.sessions() as session:
        if pack is not None:
            size = sum(spec.length for _, spec in new.values())
            await insert_ignore(session, Pack, [{"key": pack, "size": size, "created_at": now}])
            await insert_ignore(
                session,
                Frame,
                [
                    {
                        "digest": d,
                        "chunk_digest": spec.chunk,
                        "raw_length": spec.raw_length,
                        "pack_key": pack,
                        "pack_offset": positions[d],
                        "length": spec.length,
                    }
                    for d, (_, spec) in new.items()
                ],
            )
        exists = await session.get(Blob, recipe.digest) is not None
        if not exists:
            await insert_ignore(
                session,
                Blob,
                [{"digest": recipe.digest, "size": recipe.size, "media_type": mt.DATA_BLOB, "created_at": now}],
            )
            rows, chunks, offset = [], [], 0
            for spec in recipe.frames:
                rows.append(
                    {"blob_digest": recipe.digest, "offset": offset, "frame_digest": spec.digest, "length": spec.length}
                )
                chunks.append(
                    {"digest": spec.chunk, "blob_digest": recipe.digest, "offset": offset, "length": spec.length}
                )
                offset += spec.length
            await insert_ignore(session, RecipeFrame, rows)
            await insert_ignore(session, Chunk, chunks)
        await insert_ignore(
            session, RepositoryBlob, [{"repository_id": repository_id, "blob_digest": recipe.digest, "created_at": now}]
        )
        await session.commit()
