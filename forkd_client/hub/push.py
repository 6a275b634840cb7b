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

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.chunktree import file_chunk_tree
from manifest.signature import fingerprint

from ..snapdir import LocalSnapshot, carried_fields
from ..store import SnapshotStore
from .blobupload import RecipeUpload, recipe_document, upload_blob, upload_part_bytes
from .client import ANYWHERE, HubClient
from .layers import BuiltLayer, build_layer
from .progress import NullProgress, Progress
from .reference import Reference
from .signing import push_signature
from .state import TransferState
from .streaming import FrameUploader, StreamedBlob


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
    #: ``--record-profile``: the access-profile referrer attached to the head (set by the CLI)
    profile: dict | None = None

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
        if self.profile is not None:
            out["profile"] = self.profile
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

    def chunk_tree(path: Path, size: int, compute: Callable[[Path, int], str] = file_chunk_tree) -> str:
        # kept in the verified record: an unchanged parent or base is not read again, here or next push
        return store.verified.chunk_tree(path, size, compute)  # type: ignore[arg-type]

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
    chunk_tree: Callable[[Path, int, Callable[[Path, int], str]], str],
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
    recipes = {d: RecipeUpload.plan(client, state, name, layer.data_blobs[d]) for d in missing if d in layer.data_blobs}
    total = sum(r.inline_bytes if (r := recipes.get(d)) else layer.blob_size(d) for d in missing)
    progress.task(f"push {tag}", total + sum(s.sent for s in done.values()))
    sent = 0
    for digest, stream in done.items():
        blob = layer.data_blobs[digest]
        client.finish_recipe(name, stream.location, recipe_document(blob, stream.inline))
        sent += stream.sent
        progress.advance(stream.sent)
    for digest in missing:
        if digest in recipes:
            sent += recipes[digest].send(client, state, name, progress)
        else:
            sent += upload_blob(client, state, name, digest, layer.blobs[digest], progress)
    uploads = [(r.blob, r.inline) for r in recipes.values()] + [
        (layer.data_blobs[d], s.inline) for d, s in done.items()
    ]
    new = sum(len(inline) for _, inline in uploads)
    held = sum(len(blob.frames) - len(inline) for blob, inline in uploads)
    held_bytes = sum(f.length for blob, inline in uploads for f in blob.frames if f.digest not in inline)
    return sent, new, held, held_bytes


__all__ = ["LinkPushed", "PushResult", "push", "upload_part_bytes"]
