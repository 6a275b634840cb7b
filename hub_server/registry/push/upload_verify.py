"""A data blob's frames verified as its upload streams in: the recipe declared first, then PATCHes.

The native push may declare a data blob's recipe (registry/push/packs.py) right after opening its
upload session, before sending a byte (``PUT …/blobs/uploads/<id>/recipe``). From then on every
PATCH of that session verifies the frames it carries while it streams: each uploaded frame's
blake3 and that it decompresses to its chunk, in a worker thread while the next bytes arrive,
and every frame of the blob, uploaded or held, goes into the blob's sha256. A frame that does
not match is refused at that PATCH (the session and its bytes are deleted), not at the finish.
A client uploading while it still builds the blob declares the recipe in parts (``from``: the
frames so far, appended; the digest and size come with the finish).

The verification state lives with the session in the database (``upload_recipes``: the next
frame, the session bytes consumed, the start of a frame a PATCH ended inside, the sha256's
state from :mod:`.sha256state`), so the next PATCH may land on any replica. Finishing then
only hashes held frames after the last uploaded one, checks the digest and commits: the
session is never read back. Where the state cannot be kept (no resumable sha256, a PATCH
that ended more than :data:`MAX_CARRY` bytes into a frame, a state that fell behind the
session's bytes after a crash between the store's commit and the database's), it is marked
invalid and the finish verifies the whole session as before (:func:`packs.ingest_recipe`).

Errors: ``HubError`` (``BLOB_UPLOAD_INVALID``: a held frame gone or not matching, bytes beyond
the recipe's uploaded frames, the upload ending inside a frame; ``DIGEST_INVALID``: a frame or
the blob not matching its digest), storage errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Frame, UploadRecipe
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.sql import batched
from hub_server.registry.push.packs import (
    Recipe,
    RecipeFrameSpec,
    bad_upload,
    check_frames,
    check_held,
    parse_frames,
    parse_recipe,
)
from hub_server.registry.push.sha256state import AVAILABLE, ResumableSha256
from manifest import mediatypes as mt

__all__ = [
    "MAX_CARRY",
    "FrameStream",
    "declare",
    "declared_row",
    "declared_stream",
    "matches",
    "new_state",
    "save_state",
]

#: Bytes of a frame a PATCH may end inside and still be carried in the database.
MAX_CARRY = 1 << 20
#: Bytes handed to a worker thread at a time; one batch is checked while the next arrives.
_BATCH = 4 << 20
_RECIPES: OrderedDict[tuple[str, int], Recipe] = OrderedDict()
_RECIPES_KEPT = 16


def _parsed(ctx: RegistryContext, row: UploadRecipe) -> Recipe:
    """The session's declared recipe, parsed once per process and declaration. A recipe declared in
    parts (frames appended as they are built) has no digest yet: ``Recipe("", 0, frames so far)``."""
    key = (row.upload_id, len(row.recipe))
    recipe = _RECIPES.get(key)
    if recipe is None:
        if row.recipe.startswith(b"{"):
            recipe = parse_recipe(json.loads(row.recipe), ctx.limits.blob_bytes)
        else:  # declared in parts: one JSON list of frames per line, appended as they came
            frames = [item for line in row.recipe.splitlines() for item in json.loads(line)]
            recipe = Recipe("", 0, parse_frames(frames))
        _remember(key, recipe)
    return recipe


def _remember(key: tuple[str, int], recipe: Recipe) -> None:
    _RECIPES[key] = recipe
    while len(_RECIPES) > _RECIPES_KEPT:
        _RECIPES.popitem(last=False)


def matches(declared: Recipe, final: Recipe) -> bool:
    """Whether the finish's recipe is the one declared (all of its frames, when declared in parts)."""
    if declared.digest:
        return declared == final
    return declared.frames == final.frames


async def declare(ctx: RegistryContext, principal: Principal, upload_id: str, doc: Any, size: int) -> bool:
    """Record the recipe ``doc`` declares for the session, whose size is ``size``; True when the
    session had no recipe before.

    ``doc`` is a whole recipe (docs/http-api.md), or a part of one: ``{"mediaType", "from": n,
    "frames": [...]}`` appends frames ``n…`` to those declared (a client uploading while it still
    builds the blob); the finish then brings the digest and size. Declaring what was declared
    already is a no-op (a resumed push). Raises: HubError(BLOB_UPLOAD_INVALID) for a malformed
    declaration, one that contradicts what was declared, a first one after bytes were uploaded,
    or held frames the pusher may not read or that do not match (as :func:`packs.check_held`).
    """
    partial = isinstance(doc, dict) and "from" in doc
    if partial:
        if doc.get("mediaType") != mt.RECIPE:
            raise bad_upload(f"a recipe must be a JSON object with mediaType {mt.RECIPE!r}", field="mediaType")
        first = doc["from"]
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise bad_upload("recipe.from must be a frame index", field="from")
        recipe = Recipe("", 0, parse_frames(doc.get("frames"), first))
    else:
        first, recipe = 0, parse_recipe(doc, ctx.limits.blob_bytes)
    async with ctx.sessions() as session:
        row = await session.get(UploadRecipe, upload_id)
        declared = _parsed(ctx, row) if row is not None else None
        if declared is not None and not partial:
            if declared != recipe:
                raise bad_upload("a different recipe was declared for this upload", uuid=upload_id)
            return False
        if declared is not None and (declared.digest or first > len(declared.frames)):
            raise bad_upload(
                f"recipe.from is {first}, {len(declared.frames)} frames are declared", uuid=upload_id, field="from"
            )
        have = declared.frames if declared is not None else ()
        if have[first : first + len(recipe.frames)] == recipe.frames:
            return False  # declared already
        if first != len(have):
            raise bad_upload("a different recipe was declared for this upload", uuid=upload_id)
        if row is None and (size or first):
            raise bad_upload("declare the recipe before uploading frames", uuid=upload_id, size=size)
        await check_held(session, principal, recipe)
        frames = have + recipe.frames
        if partial:  # appended, not rewritten: a part costs its own size
            document = (
                (row.recipe if row is not None else b"") + json.dumps(_frames_json(recipe.frames)).encode() + b"\n"
            )
        else:
            document = json.dumps(
                {"mediaType": mt.RECIPE, "digest": recipe.digest, "size": recipe.size, "frames": _frames_json(frames)}
            ).encode()
        if row is None:
            row = new_state(upload_id, document)
        else:
            row.recipe = document
        session.add(row)
        await session.commit()
    _remember((upload_id, len(document)), Recipe(recipe.digest, recipe.size, frames))
    return declared is None


def _frames_json(frames: tuple[RecipeFrameSpec, ...]) -> list[list[Any]]:
    return [[f.digest, f.chunk, f.raw_length, f.length, f.inline] for f in frames]


async def declared_row(ctx: RegistryContext, upload_id: str) -> UploadRecipe | None:
    """The session's declared recipe and verification state, if a recipe was declared."""
    async with ctx.sessions() as session:
        return await session.get(UploadRecipe, upload_id)


async def declared_stream(
    ctx: RegistryContext, upload_id: str, size: int, row: UploadRecipe | None = None
) -> tuple[Recipe, FrameStream | None] | None:
    """The declared recipe and a stream continuing its verification at ``size`` session bytes;
    None without a declared recipe. The stream is None (and the state marked invalid) where the
    state cannot continue: the finish then verifies the whole session."""
    row = row or await declared_row(ctx, upload_id)
    if row is None:
        return None
    recipe = _parsed(ctx, row)
    if row.valid and row.consumed + len(row.carry) == size:
        return recipe, FrameStream(ctx, recipe, row)
    if row.valid:
        async with ctx.sessions() as session:
            await session.exec(update(UploadRecipe).where(col(UploadRecipe.upload_id) == upload_id).values(valid=False))
            await session.commit()
    return recipe, None


async def save_state(session: AsyncSession, upload_id: str, stream: FrameStream) -> None:
    """Keep ``stream``'s state with the session (in the caller's transaction; one UPDATE, the
    recipe itself is neither read nor written)."""
    await session.exec(update(UploadRecipe).where(col(UploadRecipe.upload_id) == upload_id).values(**stream.state()))


def new_state(upload_id: str, document: bytes) -> UploadRecipe:
    """The row of a recipe just declared: nothing verified yet (invalid where sha256 cannot resume)."""
    return UploadRecipe(
        upload_id=upload_id,
        recipe=document,
        next_frame=0,
        consumed=0,
        carry=b"",
        sha256_state=ResumableSha256().state() if AVAILABLE else b"",
        hashed=0,
        valid=AVAILABLE,
    )


@dataclass
class _Work:
    items: list[tuple[RecipeFrameSpec, bytes, int]]
    size: int = 0


class FrameStream:
    """Consumes a session's bytes in order against its recipe (see the module docstring).

    ``feed`` the bytes of a PATCH as they arrive, then ``settle`` before committing them;
    ``state`` is what to keep in the row. ``finish`` hashes the held frames after the last
    uploaded one and checks that the recipe is complete and the blob's digest.
    """

    def __init__(self, ctx: RegistryContext, recipe: Recipe, row: UploadRecipe) -> None:
        self._ctx = ctx
        self._recipe = recipe
        self._index = row.next_frame
        self._consumed = row.consumed
        self._buffer = bytearray(row.carry)
        self._hasher = ResumableSha256(row.sha256_state, row.hashed)
        self._inflight: asyncio.Future[None] | None = None
        self.failed = False

    async def feed(self, data: bytes) -> None:
        """Take the next bytes of a PATCH. Raises as :meth:`settle` as soon as they go beyond the
        frames declared (the hub never buffers more than a frame and a batch)."""
        self._buffer += data
        if len(self._buffer) >= _BATCH:
            await self._advance(final=False)
            if self._index >= len(self._recipe.frames) and self._buffer:
                await self.settle()

    async def settle(self) -> None:
        """Check every complete frame received; refuse bytes beyond the recipe's uploaded frames."""
        await self._advance(final=False)
        await self._wait()
        if self._index >= len(self._recipe.frames) and self._buffer:
            self.failed = True
            raise bad_upload("the upload holds more bytes than the recipe's inline frames", uploaded=self._consumed)

    def state(self) -> dict[str, Any]:
        """The ``upload_recipes`` columns that say how far the session is verified."""
        valid = len(self._buffer) <= MAX_CARRY  # else the finish verifies the whole session
        return {
            "next_frame": self._index,
            "consumed": self._consumed,
            "carry": bytes(self._buffer) if valid else b"",
            "sha256_state": self._hasher.state(),
            "hashed": self._hasher.size,
            "valid": valid,
        }

    async def finish(self, final: Recipe) -> None:
        """Hash the trailing held frames; check the upload is complete and the blob's digest
        (``final``'s: a recipe declared in parts learns its digest at the finish)."""
        self._recipe = final
        await self._advance(final=True)
        await self._wait()
        frames = self._recipe.frames
        if self._index < len(frames) or self._buffer:
            self.failed = True
            if self._index >= len(frames):
                raise bad_upload("the upload holds more bytes than the recipe's inline frames", uploaded=self._consumed)
            raise bad_upload(
                f"the upload ends inside recipe frame {self._index}", frame=self._index, uploaded=self._consumed
            )
        got = self._hasher.digest()
        if got != self._recipe.digest or self._hasher.size != self._recipe.size:
            self.failed = True
            raise HubError(
                ErrorCode.DIGEST_INVALID,
                f"the blob the recipe describes hashes to {got} ({self._hasher.size} bytes), not {self._recipe.digest}",
                {"expected": self._recipe.digest, "actual": got},
            )

    async def _advance(self, *, final: bool) -> None:
        """Take every complete frame (and, with ``final`` or before an uploaded one, the held frames
        between) off the buffer and check them, one batch in flight at a time."""
        frames = self._recipe.frames
        work = _Work([])
        position = 0
        while self._index < len(frames):
            spec = frames[self._index]
            if spec.inline:
                if len(self._buffer) - position < spec.length:
                    break
                work.items.append((spec, bytes(self._buffer[position : position + spec.length]), self._index))
                position += spec.length
                self._consumed += spec.length
                work.size += spec.length
                self._index += 1
            else:
                if not final and len(self._buffer) - position == 0:
                    break  # the next PATCH (or the finish) hashes these
                await self._held(work)
            if work.size >= _BATCH:
                await self._submit(work)
                work = _Work([])
        del self._buffer[:position]
        await self._submit(work)

    async def _held(self, work: _Work) -> None:
        """Add the run of held frames from the current one (up to a batch's bytes) to ``work``."""
        frames = self._recipe.frames
        run: list[tuple[int, RecipeFrameSpec]] = []
        size = 0
        following = self._index
        while following < len(frames) and not frames[following].inline and size < _BATCH:
            run.append((following, frames[following]))
            size += frames[following].length
            following += 1
        stored: dict[str, Frame] = {}
        async with self._ctx.sessions() as session:
            for batch in batched(sorted({spec.digest for _, spec in run})):
                rows = await session.exec(select(Frame).where(col(Frame.digest).in_(batch)))
                stored.update((f.digest, f) for f in rows.all())
        for index, spec in run:
            frame = stored.get(spec.digest)
            if frame is None:
                self.failed = True
                raise bad_upload(
                    f"recipe frame {index} ({spec.digest}) is no longer stored; upload it inline", frame=index
                )
            if frame.length != spec.length or frame.raw_length != spec.raw_length or frame.chunk_digest != spec.chunk:
                self.failed = True
                raise bad_upload(
                    f"recipe frame {index} ({spec.digest}) does not match the stored frame's lengths or chunk",
                    frame=index,
                )
            data = await self._ctx.store.read(frame.pack_key, frame.pack_offset, frame.length)
            work.items.append((spec, data, index))
            work.size += len(data)
        self._index = following

    async def _submit(self, work: _Work) -> None:
        await self._wait()
        if work.items:
            loop = asyncio.get_running_loop()
            self._inflight = loop.run_in_executor(None, check_frames, self._hasher, work.items)

    async def _wait(self) -> None:
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            try:
                await inflight
            except HubError:
                self.failed = True
                raise

    async def close(self) -> None:
        """Wait for a check still running (a request that failed otherwise): the hasher is shared."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            # the request is failing already; this only drains the thread
            with contextlib.suppress(Exception):
                await asyncio.shield(inflight)
