"""``forkd push``: send a local chain to a hub, moving only what the hub lacks.

For each link base → head: skip it when the hub already has its layer (known from a previous
push or pull, confirmed by one HEAD); otherwise build the layer (:mod:`.layers`: a pure
function of the snapshot, so every hub gets the same digests), upload every blob the hub
lacks with resumable uploads, and PUT the manifest by digest. Finally tag the head. A data
blob is sent as a recipe: the hub is asked which of its frames it already holds where this
user may read them (``frames/query``), only the others are uploaded, and the recipe (every
frame in order, each marked uploaded or held) lets the hub rebuild and verify the blob. The
recipe is declared before the frames go up, so the hub verifies each PATCH as it arrives (a hub
that predates that verifies at the finish). With ``FORKD_PUSH_STREAM=1`` the new frames go up
while the layer is still being built (:mod:`.streaming`, declaring the recipe in parts).
Interrupted at any point,
running the same command again resumes: built blobs are rebuilt byte-identically and each
upload continues from the offset the hub committed (a recipe upload keeps the frame selection
it started with; a blob streamed during the build is streamed again from its first frame).

Errors: forkd_client.hub.errors (HubError family), ClientError from the store, OSError.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from manifest import mediatypes as mt
from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.chunktree import file_chunk_tree
from manifest.layer import DataBlob
from manifest.signature import fingerprint

from ..snapdir import LocalSnapshot, carried_fields
from ..store import SnapshotStore
from .client import ANYWHERE, HubClient
from .errors import DigestInvalid, HubError, NotFound
from .layers import BuiltLayer, build_layer
from .progress import NullProgress, Progress
from .reference import Reference
from .signing import push_signature
from .state import TransferState
from .streaming import FrameUploader, StreamedBlob

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


@dataclass
class LinkPushed:
    tag: str
    digest: str
    skipped: bool
    bytes_uploaded: int = 0
    new_chunks: int = 0
    reused_chunks: int = 0
    changed_bytes: int = 0
    reused_bytes: int = 0


@dataclass
class PushResult:
    """What a push did: the summary ``forkd push --json`` prints (docs/cli.md)."""

    reference: str
    digest: str
    links: list[LinkPushed] = field(default_factory=list)
    bytes_sent: int = 0
    hub: str = ""
    tag: str = "latest"
    duration_seconds: float = 0.0
    #: the provenance referrer and the annotations it carries (set by the CLI; None when not recorded)
    provenance: dict | None = None
    signature: str | None = None
    """With ``sign``: the digest of the signature artifact pushed as a referrer of the head."""

    def to_obj(self) -> dict:
        out = {
            "reference": self.reference,
            "hub": self.hub,
            "tag": self.tag,
            "digest": self.digest,
            "bytes_sent": self.bytes_sent,
            "bytes_reused": sum(link.reused_bytes for link in self.links),
            "chunks_uploaded": sum(link.new_chunks for link in self.links),
            "chunks_reused": sum(link.reused_chunks for link in self.links),
            "duration_seconds": round(self.duration_seconds, 3),
            "links": [vars(link) for link in self.links],
            "provenance": self.provenance,
        }
        if self.signature is not None:
            out["signature"] = self.signature
        return out


def _fingerprint(store: SnapshotStore, snap: LocalSnapshot, parent_manifest: str | None) -> str:
    meta = (snap.dir / "forkd-hub.json").read_bytes() if (snap.dir / "forkd-hub.json").is_file() else b""
    meta += json.dumps(carried_fields(snap.dir), sort_keys=True).encode()  # volumes, rootfs … travel too
    # the files' own digests (cached by the verified record): forkd-made snapshots have no
    # forkd-hub.json, and a snapshot re-created under the same tag must not look pushed
    content = "".join(
        f"{role}={store.verified.digests(snap.dir / role, ('blake3', 'sha256'))['blake3']};"
        for role in ("vmstate", "memory.bin", "rootfs.ext4")
        if (snap.dir / role).is_file()
    )
    return hashlib.sha256(
        meta + b"\0" + content.encode() + b"\0" + (parent_manifest or "").encode() + b"\0" + snap.tag.encode()
    ).hexdigest()


def push(
    store: SnapshotStore,
    client: HubClient,
    local_tag: str,
    ref: Reference,
    *,
    public: bool = False,
    progress: Progress | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    force: bool = False,
    sign: Ed25519PrivateKey | None = None,
) -> PushResult:
    """Push the chain of ``local_tag`` to ``ref`` (``ns/repo[:tag]``); returns the head's digest.

    The tag moves only if no other push moved it since this one started (the final PUT carries
    the digest it pointed at then); otherwise TagConflict, unless ``force``. With ``sign``, the
    head's signature is pushed as its referrer before the tag moves (:mod:`.signing`).
    """
    progress = progress or NullProgress()
    started = time.monotonic()
    state = TransferState(store.root / "transfers.json")
    chain = store.chain(local_tag)
    name = ref.name
    sent_before = client.bytes_sent
    layer_tag = ref.tag or "latest"
    result = PushResult(str(ref), "", hub=client.base_url, tag=layer_tag)
    expect = ANYWHERE if force else client.tag_digest(name, layer_tag)
    parent: LocalSnapshot | None = None
    parent_digest: str | None = None

    def chunk_tree(path: Path, size: int) -> str:
        # kept in the verified record: an unchanged parent or base is not read again, here or next push
        return store.verified.chunk_tree(path, size, file_chunk_tree)

    for snap in chain:
        key = f"pushed|{client.base_url}|{name}|{_fingerprint(store, snap, parent_digest)}"
        cached = state.get(key) or _pulled_layer(snap, parent, parent_digest, client.base_url)
        # a format-v1 layer (blake3-named) is pushed again, as format v2
        if cached and cached.startswith("sha256:") and client.manifest_exists(name, cached):
            progress.log(f"{snap.tag}: layer {cached[:19]}… already on the hub")
            result.links.append(LinkPushed(snap.tag, cached, skipped=True))
        else:
            result.links.append(
                _push_link(
                    store, client, state, snap, parent, parent_digest, name, public, progress, chunk_size, chunk_tree
                )
            )
            state.set(key, result.links[-1].digest)
        parent, parent_digest = snap, result.links[-1].digest
    if sign is not None:  # every link is on the hub by digest; the tag has not moved yet
        progress.log(f"signing {parent_digest} with key {fingerprint(sign.public_key())[:23]}…")
        result.signature = push_signature(client, name, parent_digest, sign)  # type: ignore[arg-type]
    manifest, _ = client.get_manifest(name, parent_digest)  # type: ignore[arg-type]
    result.digest = client.put_manifest(name, layer_tag, manifest, public=public, expect=expect)
    result.bytes_sent = client.bytes_sent - sent_before
    result.duration_seconds = time.monotonic() - started
    return result


def _pulled_layer(snap: LocalSnapshot, parent: LocalSnapshot | None, parent_digest: str | None, hub: str) -> str | None:
    """The layer digest ``snap`` was pulled as from this hub, when its parent is that layer's parent too."""
    origin = snap.origin or {}
    if origin.get("hub") != hub or not origin.get("manifest_digest"):
        return None
    if parent is not None and parent_digest != (parent.origin or {}).get("manifest_digest"):
        return None
    return origin["manifest_digest"]


def _push_link(
    store: SnapshotStore,
    client: HubClient,
    state: TransferState,
    snap: LocalSnapshot,
    parent: LocalSnapshot | None,
    parent_digest: str | None,
    name: str,
    public: bool,
    progress: Progress,
    chunk_size: int,
    chunk_tree: Callable[[Path, int], str],
) -> LinkPushed:
    def digests(path: Path) -> dict[str, str]:
        return store.verified.digests(path, ("blake3", "sha256"))

    work = store.root / ".push" / hashlib.sha256(f"{snap.dir}|{parent_digest}".encode()).hexdigest()[:16]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    try:
        progress.log(f"{snap.tag}: computing layer against {parent.tag if parent else 'nothing (base)'}")
        progress.busy(f"{snap.tag}: computing layer")  # piped: "still working" lines on a big layer
        # new frames go to the hub while the layer is still being built (.streaming)
        uploader = FrameUploader(client, name, upload_part_bytes()) if _streaming() else None
        try:
            layer = build_layer(
                snap,
                parent,
                parent_digest,
                work,
                digests,
                chunk_tree,
                chunk_size=chunk_size,
                on_frame=uploader.frame if uploader is not None else None,
            )
        except BaseException:
            if uploader is not None:
                uploader.abort()
            raise
        streamed = uploader.close() if uploader is not None else {}
        uploaded, new_frames, held_frames, held_bytes = _upload_blobs(
            client, state, name, layer, progress, snap.tag, streamed
        )
        if not client.manifest_exists(name, layer.digest):
            client.put_manifest(name, layer.digest, layer.manifest, public=public)
        return LinkPushed(
            snap.tag,
            layer.digest,
            skipped=False,
            bytes_uploaded=uploaded,
            new_chunks=new_frames,
            reused_chunks=held_frames,
            changed_bytes=layer.changed_bytes,
            reused_bytes=held_bytes,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _streaming() -> bool:
    """``FORKD_PUSH_STREAM=1``: upload frames while building. Off by default: on the 2 shared cores
    where it was measured it was slower (docs/benchmarks.md, "Hub: chunk upload…")."""
    return os.environ.get("FORKD_PUSH_STREAM", "0").strip() in ("1", "true", "yes")


def _upload_blobs(
    client: HubClient,
    state: TransferState,
    name: str,
    layer: BuiltLayer,
    progress: Progress,
    tag: str,
    streamed: dict[int, StreamedBlob],
) -> tuple[int, int, int, int]:
    """Finish the data blobs streamed during the build and upload what else the hub lacks; return
    (bytes sent, frames uploaded, frames the hub already held, bytes of those held frames)."""
    done: dict[str, StreamedBlob] = {}
    for number, digest in enumerate(layer.data_blobs):
        blob, stream = layer.data_blobs[digest], streamed.get(number)
        if stream is not None and stream.declared == len(blob.frames):
            done[digest] = stream
        elif stream is not None:  # cannot happen with a whole build; start that blob over
            client.cancel_upload(stream.location)
    missing = [d for d in layer.blobs if d not in done and not client.blob_exists(name, d)]
    recipes = {
        d: _RecipeUpload.plan(client, state, name, layer.data_blobs[d]) for d in missing if d in layer.data_blobs
    }
    total = sum(r.inline_bytes if (r := recipes.get(d)) else layer.blob_size(d) for d in missing)
    progress.task(f"push {tag}", total + sum(s.sent for s in done.values()))
    sent = 0
    for digest, stream in done.items():
        blob = layer.data_blobs[digest]
        client.finish_recipe(name, stream.location, _recipe_document(blob, stream.inline))
        sent += stream.sent
        progress.advance(stream.sent)
    for digest in missing:
        if digest in recipes:
            sent += recipes[digest].send(client, state, name, progress)
        else:
            sent += _upload_one(client, state, name, digest, layer.blobs[digest], progress)
    uploads = [(r.blob, r.inline) for r in recipes.values()] + [
        (layer.data_blobs[d], s.inline) for d, s in done.items()
    ]
    new = sum(len(inline) for _, inline in uploads)
    held = sum(len(blob.frames) - len(inline) for blob, inline in uploads)
    held_bytes = sum(f.length for blob, inline in uploads for f in blob.frames if f.digest not in inline)
    return sent, new, held, held_bytes


def _recipe_document(blob: DataBlob, inline: set[str]) -> dict:
    """The recipe of ``blob`` (docs/http-api.md): every frame in order, marked uploaded or held."""
    return {
        "mediaType": mt.RECIPE,
        "digest": blob.digest,
        "size": blob.size,
        "frames": [[f.digest, f.chunk, f.raw_length, f.length, f.digest in inline] for f in blob.frames],
    }


@dataclass
class _RecipeUpload:
    """A data blob pushed as its new frames plus its recipe (docs/http-api.md, "Push, step by step")."""

    blob: DataBlob
    key: str
    location: str | None
    inline: set[str]

    @property
    def inline_bytes(self) -> int:
        return sum(f.length for f in self.blob.frames if f.digest in self.inline)

    @classmethod
    def plan(cls, client: HubClient, state: TransferState, name: str, blob: DataBlob) -> _RecipeUpload:
        """Resume the selection of an interrupted upload, or ask the hub which frames it holds."""
        key = f"recipe|{client.base_url}|{name}|{blob.digest}"
        saved = state.get(key)
        if saved:
            try:
                doc = json.loads(saved)
                return cls(blob, key, str(doc["location"]), set(doc["inline"]))
            except (ValueError, KeyError, TypeError):
                state.delete(key)
        held = client.query_frames(name, [f.digest for f in blob.frames])
        return cls(blob, key, None, {f.digest for f in blob.frames if f.digest not in held})

    def _save(self, state: TransferState) -> None:
        state.set(self.key, json.dumps({"location": self.location, "inline": sorted(self.inline)}))

    def send(self, client: HubClient, state: TransferState, name: str, progress: Progress) -> int:
        """Upload the inline frames (resuming at the hub's offset), then finish with the recipe."""
        spans = [(f.offset, f.length) for f in self.blob.frames if f.digest in self.inline]
        size = sum(n for _, n in spans)
        offset = 0
        if self.location:
            try:
                offset = client.upload_offset(self.location)
            except NotFound:
                self.location = None
            if offset > size:
                client.cancel_upload(self.location)  # type: ignore[arg-type]
                self.location, offset = None, 0
        recipe = _recipe_document(self.blob, self.inline)
        if not self.location:
            self.location = client.start_upload(name)
            self._save(state)
            client.declare_recipe(name, self.location, recipe)  # the hub verifies each part as it arrives
        progress.advance(offset)
        ends = list(itertools.accumulate(n for _, n in spans))
        part_size = upload_part_bytes()
        sent = 0
        with open(self.blob.path, "rb") as f:
            while offset < size:
                part = _read_spans(f, spans, offset, _part_end(ends, offset, part_size) - offset)
                self.location = client.upload_chunk(self.location, part, offset)
                self._save(state)
                offset += len(part)
                sent += len(part)
                progress.advance(len(part))
        try:
            client.finish_recipe(name, self.location, recipe)
        finally:
            state.delete(self.key)  # finished, or refused (the hub dropped the session): start over next time
        return sent


def _part_end(ends: list[int], offset: int, part_size: int) -> int:
    """Where the part from ``offset`` ends: at the last frame end within ``part_size`` bytes (the hub
    then verifies whole frames per request and carries nothing over), or at the first frame end
    when one frame is larger than a part."""
    last = bisect.bisect_right(ends, offset + part_size) - 1
    if last >= 0 and ends[last] > offset:
        return ends[last]
    return ends[bisect.bisect_right(ends, offset)]


def _read_spans(f: BinaryIO, spans: list[tuple[int, int]], offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of the concatenation of the file's ``spans``."""
    out = bytearray()
    position = 0
    for start, n in spans:
        if position + n <= offset:
            position += n
            continue
        if len(out) >= length:
            break
        skip = max(0, offset - position)
        take = min(n - skip, length - len(out))
        f.seek(start + skip)
        out += f.read(take)
        position += n
    return bytes(out)


def _upload_one(
    client: HubClient, state: TransferState, name: str, digest: str, source: bytes | Path, progress: Progress
) -> int:
    key = f"upload|{client.base_url}|{name}|{digest}"
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    location = state.get(key)
    offset = 0
    if location:
        try:
            offset = client.upload_offset(location)
        except NotFound:
            location = None
        if offset > size:
            client.cancel_upload(location)  # type: ignore[arg-type]
            location, offset = None, 0
    if not location:
        location = client.start_upload(name)
        state.set(key, location)
    progress.advance(offset)
    part_size = upload_part_bytes()
    sent = 0
    with open(source, "rb") if isinstance(source, Path) else _BytesReader(source) as f:
        f.seek(offset)
        while offset < size:
            part = f.read(min(part_size, size - offset))
            location = client.upload_chunk(location, part, offset)
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


__all__ = ["LinkPushed", "PushResult", "push"]
