"""Sending one blob to the hub: a data blob's new frames with its recipe, or any other blob whole.

:class:`RecipeUpload` asks the hub which frames of a data blob it holds (``frames/query``),
opens a session, declares the recipe on it (so the hub verifies each part as it arrives;
docs/http-api.md), uploads the other frames in parts, and finishes with the recipe;
:func:`upload_blob` uploads any other blob. Both resume an interrupted upload from the offset
the hub committed (a recipe upload keeps the frame selection it started with), keeping
their place in the transfer state.

Errors: forkd_client.hub.errors (HubError family), OSError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from manifest import mediatypes as mt
from manifest.layer import DataBlob

from .errors import DigestInvalid, HubError, NotFound
from .progress import Progress
from .repository import RepositoryClient
from .retry import transient
from .state import TransferState

__all__ = ["UPLOAD_PART", "RecipeUpload", "recipe_document", "upload_blob", "upload_part_bytes"]

UPLOAD_PART = 16 << 20


def upload_part_bytes() -> int:
    """Bytes per upload request: each is committed by the hub, so a resume repeats at most one.
    ``FORKD_UPLOAD_PART_BYTES`` overrides the 16 MiB default (minimum 64 KiB)."""
    raw = os.environ.get("FORKD_UPLOAD_PART_BYTES")
    if raw is None:
        return UPLOAD_PART
    if not raw.strip().isdigit():
        raise HubError(f"FORKD_UPLOAD_PART_BYTES={raw!r} is not a whole number of bytes")
    return max(64 << 10, int(raw))


def recipe_document(blob: DataBlob, inline: set[str]) -> dict:
    """The recipe of ``blob`` (docs/http-api.md): every frame in order, marked uploaded or held."""
    return {
        "mediaType": mt.RECIPE,
        "digest": blob.digest,
        "size": blob.size,
        "frames": [[f.digest, f.chunk, f.raw_length, f.length, f.digest in inline] for f in blob.frames],
    }


@dataclass
class RecipeUpload:
    """A data blob pushed as its new frames plus its recipe (docs/http-api.md, "Push, step by step")."""

    blob: DataBlob
    key: str
    location: str | None
    inline: set[str]
    declared: bool = True
    """Whether the session at ``location`` has the recipe declared (a resumed one has)."""

    @property
    def inline_bytes(self) -> int:
        return sum(f.length for f in self.blob.frames if f.digest in self.inline)

    @classmethod
    def plan(cls, repo: RepositoryClient, state: TransferState, blob: DataBlob) -> RecipeUpload | None:
        """Resume the selection of an interrupted upload; else mount the blob (None: mounted, nothing to
        send) or, in the session the hub opened instead, ask it which frames it holds."""
        key = _recipe_key(repo, blob.digest)
        saved = state.get(key)
        if saved:
            try:
                doc = json.loads(saved)
                return cls(blob, key, str(doc["location"]), set(doc["inline"]))
            except (ValueError, KeyError, TypeError):
                state.delete(key)
        location = repo.mount_or_start(blob.digest)
        if location is None:
            return None
        held = repo.query_frames([f.digest for f in blob.frames])
        plan = cls(blob, key, location, {f.digest for f in blob.frames if f.digest not in held}, declared=False)
        plan._save(state)
        return plan

    def _save(self, state: TransferState) -> None:
        state.set(self.key, json.dumps({"location": self.location, "inline": sorted(self.inline)}))

    def send(self, repo: RepositoryClient, state: TransferState, progress: Progress) -> int:
        """Upload the inline frames (resuming at the hub's offset), then finish with the recipe. Safe to call
        again after a failure: it resumes, or finds the blob finished."""
        client = repo.hub
        spans = _coalesced((f.offset, f.length) for f in self.blob.frames if f.digest in self.inline)
        size = sum(n for _, n in spans)
        offset = 0
        if self.location and self.declared:
            try:
                offset = client.upload_offset(self.location)
            except NotFound:
                self.location = None
                if repo.blob_exists(self.blob.digest):  # the finish committed; its answer was lost
                    state.delete(self.key)
                    return 0
            if offset > size:
                client.cancel_upload(self.location)  # type: ignore[arg-type]
                self.location, offset = None, 0
        recipe = recipe_document(self.blob, self.inline)
        if not self.location or not self.declared:
            if not self.location:
                self.location = repo.start_upload()
                self._save(state)
            repo.declare_recipe(self.location, recipe)  # the hub verifies each part as it arrives
            self.declared = True
        progress.advance(offset)
        part_size = upload_part_bytes()
        sent = 0
        with open(self.blob.path, "rb") as f:
            while offset < size:
                # whole parts, not cut at frame ends: an object store keeps appends in parts of this
                # size (S3 multipart), and the hub carries a frame a part ends inside to the next one
                part = _read_spans(f, spans, offset, min(part_size, size - offset))
                location = client.upload_chunk(self.location, part, offset)
                if location != self.location:  # the offset is the hub's to tell: only a moved session is saved
                    self.location = location
                    self._save(state)
                offset += len(part)
                sent += len(part)
                progress.advance(len(part))
        try:
            repo.finish_recipe(self.location, recipe)
        except HubError as e:
            if not transient(e):  # refused: the hub dropped the session, start over next time
                state.delete(self.key)
            raise
        state.delete(self.key)
        return sent


def _recipe_key(repo: RepositoryClient, digest: str) -> str:
    return f"recipe|{repo.hub.base_url}|{repo.name}|{digest}"


def _coalesced(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(offset, length)`` spans with each run of adjacent ones merged: the frames of a new blob
    are usually all uploaded, and a part is then read in one call instead of one per frame."""
    out: list[tuple[int, int]] = []
    for start, n in spans:
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((start, n))
    return out


def _read_spans(f: BinaryIO, spans: list[tuple[int, int]], offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of the concatenation of the file's ``spans``."""
    pieces: list[bytes] = []
    got = 0
    position = 0
    for start, n in spans:
        if position + n <= offset:
            position += n
            continue
        if got >= length:
            break
        skip = max(0, offset - position)
        f.seek(start + skip)
        piece = f.read(min(n - skip, length - got))
        pieces.append(piece)
        got += len(piece)
        position += n
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def upload_blob(
    repo: RepositoryClient, state: TransferState, digest: str, source: bytes | Path, progress: Progress
) -> int:
    """Upload blob ``digest`` (its bytes, or a file) to ``repo`` in parts, resuming a session this
    state remembers from the offset the hub committed, or mounting it when a repository the token may read
    holds it; return the bytes sent. Safe to call again after a failure. Raises: as the module says."""
    client = repo.hub
    key = f"upload|{client.base_url}|{repo.name}|{digest}"
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    location = state.get(key)
    offset = 0
    if location:
        try:
            offset = client.upload_offset(location)
        except NotFound:
            location = None
            if repo.blob_exists(digest):  # the finish committed; its answer was lost
                state.delete(key)
                progress.advance(size)
                return 0
        if offset > size:
            client.cancel_upload(location)  # type: ignore[arg-type]
            location, offset = None, 0
    if not location:
        location = repo.mount_or_start(digest)
        if location is None:  # mounted from a repository this token may read
            progress.advance(size)
            return 0
        state.set(key, location)
    progress.advance(offset)
    part_size = upload_part_bytes()
    sent = 0
    with open(source, "rb") if isinstance(source, Path) else _BytesReader(source) as f:
        f.seek(offset)
        while offset < size:
            part = f.read(min(part_size, size - offset))
            moved = client.upload_chunk(location, part, offset)
            if moved != location:  # the offset is the hub's to tell: only a moved session is saved
                location = moved
                state.set(key, location)
            offset += len(part)
            sent += len(part)
            progress.advance(len(part))
    try:
        client.finish_upload(location, digest)
    except DigestInvalid:
        # the hub holds bytes that are not this blob (a changed file, a torn resume): start over
        # next time instead of resuming the same bad session forever
        state.delete(key)
        client.cancel_upload(location)
        raise
    state.delete(key)
    return sent


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def __enter__(self) -> _BytesReader:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def seek(self, pos: int) -> None:
        self.pos = pos

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out
