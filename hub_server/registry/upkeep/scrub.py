"""``forkd-hub verify``: re-hash what the hub stores and check the database against the store.

:meth:`Scrubber.run` checks, in order:

1. every ``blobs`` row: a whole object is streamed from ``blobs/…`` and must have the row's size
   and hash to its digest; a data blob stored as a recipe (``recipe_frames``) is streamed through
   its frames (``registry/content/recipes.py``) and must do the same. A row whose object (or one of whose
   packs) is missing is reported ``missing``;
2. every ``packs`` row: the object exists with the row's size, and each of its ``frames`` hashes
   (blake3 of the stored bytes) to the frame's digest and decompresses to ``raw_length`` bytes
   hashing to its chunk digest;
3. objects under ``blobs/`` and ``packs/`` with no row, last written before the grace period
   (younger ones may be a push between its move and its commit), reported ``orphan``.

With ``quarantine``, what is wrong is moved aside and marked, never deleted: a damaged or orphan
object moves to ``quarantine/<its key>`` (``registry/core/paths.py``) and gets a damage mark
(``registry/content/damage.py``) saying where; what cannot be moved (a recipe, a missing object, one bad
frame inside a pack other blobs share) is marked in place. A pack is moved aside only when the
object as a whole is wrong (its size); a bad frame is marked, and the recipes using it fail
check 1.

Errors: storage errors other than a missing object (``StorageUnavailable``, ``StorageError``),
database errors; problems found are the report, not errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import anyio.to_thread
from sqlmodel import col, select

from hub_server.db.models import Blob, Frame, Pack, RecipeFrame
from hub_server.registry.content.damage import mark
from hub_server.registry.content.recipes import iter_blob_range
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.paths import (
    BLOBS_PREFIX,
    FRAME_PACKS_PREFIX,
    blob_key,
    digest_from_blob_key,
    is_pack_key,
    quarantine_key,
)
from hub_server.storage import BlobNotFound, InvalidRange
from manifest.assemble import decompress_chunk
from manifest.digest import Hasher, digest_bytes
from manifest.errors import ManifestError

__all__ = ["Problem", "ScrubReport", "Scrubber"]

#: Pack bytes read at once when checking its frames.
PACK_WINDOW = 16 << 20
_HASH_IN_THREAD = 1 << 20


@dataclass(frozen=True)
class Problem:
    """One thing found wrong: ``kind`` (``missing``, ``size``, ``digest``, ``frame``, ``orphan``), the storage
    ``key``, what was checked (``subject``: a digest, a pack key), a ``reason`` and the ``action`` taken
    (``reported``, ``marked``, ``quarantined``)."""

    kind: str
    key: str
    subject: str
    reason: str
    action: str = "reported"
    moved_to: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "subject": self.subject,
            "reason": self.reason,
            "action": self.action,
            "movedTo": self.moved_to,
        }


@dataclass
class ScrubReport:
    blobs: int = 0
    recipes: int = 0
    packs: int = 0
    frames: int = 0
    bytes_hashed: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": {
                "blobs": self.blobs,
                "recipes": self.recipes,
                "packs": self.packs,
                "frames": self.frames,
                "bytesHashed": self.bytes_hashed,
            },
            "problems": [p.to_json() for p in self.problems],
            "clean": self.clean,
        }


class Scrubber:
    """One verification pass over a hub's database and blob store (see the module docstring)."""

    def __init__(
        self, ctx: RegistryContext, *, quarantine: bool = False, grace: timedelta = timedelta(hours=1)
    ) -> None:
        self.ctx = ctx
        self.quarantine = quarantine
        self.grace = grace

    async def run(self) -> ScrubReport:
        """Check everything; quarantine what is wrong when asked. Raises StorageUnavailable, StorageError."""
        report = ScrubReport()
        cutoff = self.ctx.clock() - self.grace
        async with self.ctx.sessions() as session:
            blobs = list((await session.exec(select(Blob.digest, Blob.size).order_by(col(Blob.digest)))).all())
            recipes = set((await session.exec(select(RecipeFrame.blob_digest).distinct())).all())
            packs = list((await session.exec(select(Pack.key, Pack.size).order_by(col(Pack.key)))).all())
        for digest, size in blobs:
            if digest in recipes:
                report.recipes += 1
                await self._check_recipe(report, digest, size)
            else:
                report.blobs += 1
                await self._check_object(report, digest, size)
        for key, size in packs:
            report.packs += 1
            await self._check_pack(report, key, size)
        await self._check_orphans(report, {d for d, _ in blobs}, {k for k, _ in packs}, cutoff)
        return report

    # -- checks ------------------------------------------------------------------------------

    async def _check_object(self, report: ScrubReport, digest: str, size: int) -> None:
        key = blob_key(digest)
        try:
            stored = (await self.ctx.store.stat(key)).size
            if stored != size:
                await self._found(
                    report, "size", key, digest, f"object holds {stored} bytes, the row says {size}", movable=True
                )
                return
            got = await self._hash(self.ctx.store.open(key), digest, report)
        except BlobNotFound:
            await self._found(report, "missing", key, digest, "the database lists it, the store has no object")
            return
        if got != digest:
            await self._found(report, "digest", key, digest, f"object bytes hash to {got}", movable=True)

    async def _check_recipe(self, report: ScrubReport, digest: str, size: int) -> None:
        key = blob_key(digest)
        try:
            got = await self._hash(_stream(iter_blob_range(self.ctx, digest, size, True)), digest, report, size=size)
        except (BlobNotFound, InvalidRange) as e:
            await self._found(report, "missing", key, digest, f"a pack its recipe reads is missing or short: {e}")
            return
        if got != digest:
            await self._found(report, "digest", key, digest, f"the recipe's frames assemble to {got}")

    async def _check_pack(self, report: ScrubReport, key: str, size: int) -> None:
        try:
            stored = (await self.ctx.store.stat(key)).size
        except BlobNotFound:
            await self._found(report, "missing", key, key, "the database lists this pack, the store has no object")
            return
        if stored != size:
            await self._found(report, "size", key, key, f"pack holds {stored} bytes, the row says {size}", movable=True)
            return
        async with self.ctx.sessions() as session:
            frames = list(
                (await session.exec(select(Frame).where(Frame.pack_key == key).order_by(col(Frame.pack_offset)))).all()
            )
        start, window = 0, b""
        for frame in frames:
            report.frames += 1
            end = frame.pack_offset + frame.length
            if end > size:
                await self._found(
                    report,
                    "frame",
                    key,
                    frame.digest,
                    f"frame {frame.pack_offset}+{frame.length} lies past the pack's end ({size} bytes)",
                )
                continue
            if not (start <= frame.pack_offset and end <= start + len(window)):
                start = frame.pack_offset
                window = await self.ctx.store.read(
                    key, start, min(size, start + max(PACK_WINDOW, frame.length)) - start
                )
            data = window[frame.pack_offset - start : end - start]
            report.bytes_hashed += len(data)
            reason = await anyio.to_thread.run_sync(_frame_fault, data, frame)
            if reason is not None:
                await self._found(report, "frame", key, frame.digest, reason)

    async def _check_orphans(
        self, report: ScrubReport, blob_rows: set[str], pack_rows: set[str], cutoff: datetime
    ) -> None:
        for prefix in (BLOBS_PREFIX, FRAME_PACKS_PREFIX):
            async for key in self.ctx.store.list(prefix):
                if prefix == BLOBS_PREFIX and digest_from_blob_key(key) in blob_rows:
                    continue
                if prefix == FRAME_PACKS_PREFIX and is_pack_key(key) and key in pack_rows:
                    continue
                try:
                    info = await self.ctx.store.stat(key)
                except BlobNotFound:
                    continue  # deleted meanwhile (a GC)
                if info.modified <= cutoff:
                    await self._found(
                        report,
                        "orphan",
                        key,
                        digest_from_blob_key(key) or key,
                        "the store holds this object, the database has no row for it",
                        movable=True,
                    )

    # -- helpers -----------------------------------------------------------------------------

    async def _hash(self, pieces: Any, digest: str, report: ScrubReport, *, size: int | None = None) -> str:
        hasher = Hasher(digest.partition(":")[0])
        async with pieces as stream:
            async for piece in stream:
                if len(piece) >= _HASH_IN_THREAD:
                    await anyio.to_thread.run_sync(hasher.update, piece)
                else:
                    hasher.update(piece)
        report.bytes_hashed += hasher.size
        return str(hasher.digest())

    async def _found(
        self, report: ScrubReport, kind: str, key: str, subject: str, reason: str, *, movable: bool = False
    ) -> None:
        problem = Problem(kind, key, subject, reason)
        if self.quarantine:
            moved_to = None
            if movable:
                moved_to = quarantine_key(key)
                try:
                    await self.ctx.store.move(key, moved_to)
                except BlobNotFound:
                    moved_to = None
            damage_key = key if kind != "frame" else f"{key}#{subject}"
            await mark(
                self.ctx,
                damage_key,
                "orphan" if kind == "orphan" else kind,
                f"forkd-hub verify: {reason}",
                moved_to=moved_to,
            )
            problem = Problem(kind, key, subject, reason, "quarantined" if moved_to else "marked", moved_to)
        report.problems.append(problem)


class _stream:
    """An async iterator of byte pieces usable as ``async with`` (like a store's ``open``)."""

    def __init__(self, pieces: AsyncIterator[bytes]) -> None:
        self._pieces = pieces

    async def __aenter__(self) -> AsyncIterator[bytes]:
        return self._pieces

    async def __aexit__(self, *exc: object) -> None:
        close = getattr(self._pieces, "aclose", None)
        if close is not None:
            await close()


def _frame_fault(data: bytes, frame: Frame) -> str | None:
    """Why a stored frame is wrong, or None (on a worker thread)."""
    got = str(digest_bytes(data, "blake3"))
    if got != frame.digest:
        return f"stored frame bytes hash to {got}"
    try:
        decompress_chunk(data, frame.raw_length, frame.chunk_digest, f"frame {frame.digest}")
    except ManifestError as e:
        return str(e)
    return None
