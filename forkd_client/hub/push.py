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
from functools import partial
from pathlib import Path
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.chunktree import file_chunk_tree
from manifest.layer import DataBlob
from manifest.signature import fingerprint

from ..rootfs import outside_rootfs, push_warning
from ..snapdir import SNAPSHOT_JSON, LocalSnapshot, read_json_object
from ..store import SnapshotStore
from .blobupload import RecipeUpload, recipe_document, upload_blob, upload_part_bytes
from .client import HubClient
from .errors import NotFound
from .layers import BuiltLayer, build_layer, config_metadata
from .progress import NullProgress, Progress
from .reference import Reference
from .repository import ANYWHERE, RepositoryClient
from .signing import push_signature
from .state import TransferState
from .streaming import FrameUploader, StreamedBlob

T = TypeVar("T")


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
    warnings: list[str] = field(default_factory=list)
    """What the push did not send and the pulling host must provide (a rootfs outside a snapshot's directory)."""

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
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


def _fingerprint(store: SnapshotStore, snap: LocalSnapshot, parent_manifest: str | None) -> str:
    meta = (snap.dir / "forkd-hub.json").read_bytes() if (snap.dir / "forkd-hub.json").is_file() else b""
    # volumes, an outside rootfs (its path as it travels, its image's sha256) … are in the config too
    meta += json.dumps(config_metadata(snap, lambda p: store.verified.digests(p, ("sha256",))), sort_keys=True).encode()
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
    chain_push = ChainPush(store, client.repository(ref.name), public, progress or NullProgress(), chunk_size)
    return chain_push.run(local_tag, ref, force=force, sign=sign)


class ChainPush:
    """One push to repository ``repo``; :meth:`run` reads as its stages: per link base → head, skip
    it (the hub has its layer) or :meth:`push_link` (build the layer, :meth:`upload_blobs`, PUT its
    manifest by digest) → sign the head → move the tag. What the stages share lives here."""

    def __init__(
        self, store: SnapshotStore, repo: RepositoryClient, public: bool, progress: Progress, chunk_size: int
    ) -> None:
        self.store, self.repo, self.public, self.progress, self.chunk_size = store, repo, public, progress, chunk_size
        self.state = TransferState(store.root / "transfers.json")

    def run(self, local_tag: str, ref: Reference, *, force: bool, sign: Ed25519PrivateKey | None) -> PushResult:
        """Push the chain of ``local_tag``, then tag its head as ``ref`` (see :func:`push`)."""
        store, repo, hub, progress = self.store, self.repo, self.repo.hub, self.progress
        started = time.monotonic()
        chain = store.chain(local_tag)
        sent_before = hub.bytes_sent
        layer_tag = ref.tag or "latest"
        result = PushResult(str(ref), "", hub=hub.base_url, tag=layer_tag)
        expect = ANYWHERE if force else repo.tag_digest(layer_tag)
        parent: LocalSnapshot | None = None
        parent_digest: str | None = None
        for snap in chain:
            outside = outside_rootfs(snap.dir, read_json_object(snap.dir / SNAPSHOT_JSON) or {})
            if outside is not None:  # as forkd's own push warns: the image is not sent
                result.warnings.append(push_warning(snap.tag, outside))
            key = f"pushed|{hub.base_url}|{repo.name}|{_fingerprint(store, snap, parent_digest)}"
            cached = self.state.get(key) or _pulled_layer(snap, parent, parent_digest, hub.base_url)
            # a format-v1 layer (blake3-named) is pushed again, as format v2
            if cached and cached.startswith("sha256:") and repo.manifest_exists(cached):
                progress.log(f"{snap.tag}: layer {cached[:19]}… already on the hub")
                result.links.append(LinkPushed(snap.tag, cached, skipped=True))
            else:
                result.links.append(self.push_link(snap, parent, parent_digest))
                self.state.set(key, result.links[-1].digest)
            parent, parent_digest = snap, result.links[-1].digest
        assert parent_digest is not None  # a chain has at least its base
        if sign is not None:  # every link is on the hub by digest; the tag has not moved yet
            progress.log(f"signing {parent_digest} with key {fingerprint(sign.public_key())[:23]}…")
            result.signature = push_signature(repo, parent_digest, sign)
        manifest, _ = repo.get_manifest(parent_digest)
        result.digest = repo.put_manifest(layer_tag, manifest, public=self.public, expect=expect)
        result.bytes_sent = hub.bytes_sent - sent_before
        result.duration_seconds = time.monotonic() - started
        return result

    def chunk_tree(self, path: Path, size: int, compute: Callable[[Path, int], str] = file_chunk_tree) -> str:
        """A file's chunk-tree digest, kept in the verified record: an unchanged parent or base is not
        read again, here or next push."""
        return self.store.verified.chunk_tree(path, size, compute)  # type: ignore[arg-type]

    def digests(self, path: Path) -> dict[str, str]:
        return self.store.verified.digests(path, ("blake3", "sha256"))

    def push_link(self, snap: LocalSnapshot, parent: LocalSnapshot | None, parent_digest: str | None) -> LinkPushed:
        """Build ``snap``'s layer against ``parent`` (a pure function of both: every hub gets the same
        digests), upload what the hub lacks, PUT the manifest by digest."""
        store, repo, progress = self.store, self.repo, self.progress
        work = store.root / ".push" / hashlib.sha256(f"{snap.dir}|{parent_digest}".encode()).hexdigest()[:16]
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        try:
            progress.log(f"{snap.tag}: computing layer against {parent.tag if parent else 'nothing (base)'}")
            progress.busy(f"{snap.tag}: computing layer")  # piped: "still working" lines on a big layer
            # new frames go to the hub while the layer is still being built (.streaming)
            uploader = FrameUploader(repo, upload_part_bytes()) if _streaming() else None
            try:
                layer = build_layer(
                    snap,
                    parent,
                    parent_digest,
                    work,
                    self.digests,
                    self.chunk_tree,
                    chunk_size=self.chunk_size,
                    on_frame=uploader.frame if uploader is not None else None,
                )
            except BaseException:
                if uploader is not None:
                    uploader.abort()
                raise
            streamed = uploader.close() if uploader is not None else {}
            uploaded, new_frames, held_frames, held_bytes = self.upload_blobs(layer, snap.tag, streamed)
            if not repo.manifest_exists(layer.digest):
                repo.put_manifest(layer.digest, layer.manifest, public=self.public)
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

    def upload_blobs(self, layer: BuiltLayer, tag: str, streamed: dict[int, StreamedBlob]) -> tuple[int, int, int, int]:
        """Finish the data blobs streamed during the build and upload what else the hub lacks, mounting
        what a repository the token may read already holds; return (bytes sent, frames uploaded, frames
        the hub already held, bytes of those held frames). Each blob is retried through outages
        (:mod:`.retry`): an upload resumes where the hub committed."""
        repo, state, progress = self.repo, self.state, self.progress
        done: dict[str, StreamedBlob] = {}
        for number, digest in enumerate(layer.data_blobs):
            blob, stream = layer.data_blobs[digest], streamed.get(number)
            if stream is not None and stream.declared == len(blob.frames):
                done[digest] = stream
            elif stream is not None:  # cannot happen with a whole build; start that blob over
                repo.hub.cancel_upload(stream.location)
        missing = [d for d in layer.blobs if d not in done and not repo.blob_exists(d)]
        recipes: dict[str, RecipeUpload] = {}
        for d in [d for d in missing if d in layer.data_blobs]:
            plan = self._retry(f"mount or plan {d[:19]}…", partial(RecipeUpload.plan, repo, state, layer.data_blobs[d]))
            if plan is None:  # mounted: a repository this token may read holds it
                missing.remove(d)
            else:
                recipes[d] = plan
        total = sum(r.inline_bytes if (r := recipes.get(d)) else layer.blob_size(d) for d in missing)
        progress.task(f"push {tag}", total + sum(s.sent for s in done.values()))
        sent = 0
        for digest, stream in done.items():
            blob = layer.data_blobs[digest]
            self._retry(f"finish {digest[:19]}…", partial(self._finish_streamed, blob, stream))
            sent += stream.sent
            progress.advance(stream.sent)
        for digest in missing:
            sent += self._upload(layer, digest, recipes.get(digest))
        uploads = [(r.blob, r.inline) for r in recipes.values()] + [
            (layer.data_blobs[d], s.inline) for d, s in done.items()
        ]
        new = sum(len(inline) for _, inline in uploads)
        held = sum(len(blob.frames) - len(inline) for blob, inline in uploads)
        held_bytes = sum(f.length for blob, inline in uploads for f in blob.frames if f.digest not in inline)
        return sent, new, held, held_bytes

    def _upload(self, layer: BuiltLayer, digest: str, recipe: RecipeUpload | None) -> int:
        """Upload one blob (its new frames with ``recipe``, or whole), resuming through outages."""
        once = _OnceProgress(self.progress)

        def send() -> int:
            if recipe is not None:
                return recipe.send(self.repo, self.state, once.attempt())
            return upload_blob(self.repo, self.state, digest, layer.blobs[digest], once.attempt())

        return self._retry(f"upload {digest[:19]}…", send)

    def _retry(self, what: str, step: Callable[[], T]) -> T:
        """``step`` through outages, progress being bytes the hub accepted from this push."""
        return self.repo.hub.retrier.run(what, step, lambda: self.repo.hub.bytes_sent)

    def _finish_streamed(self, blob: DataBlob, stream: StreamedBlob) -> None:
        """Finish a data blob streamed during the build; after a lost answer, find it finished."""
        try:
            self.repo.finish_recipe(stream.location, recipe_document(blob, stream.inline))
        except NotFound:
            if not self.repo.blob_exists(blob.digest):
                raise


class _OnceProgress(Progress):
    """One blob's progress across the retries of its upload: a retry reports again the offset it resumes
    from, which the bar must not count twice."""

    def __init__(self, progress: Progress) -> None:
        self._progress, self._position, self._shown = progress, 0, 0

    def attempt(self) -> _OnceProgress:
        self._position = 0
        return self

    def advance(self, nbytes: int) -> None:
        self._position += nbytes
        if self._position > self._shown:
            self._progress.advance(self._position - self._shown)
            self._shown = self._position

    def task(self, description: str, total: int) -> None:
        self._progress.task(description, total)

    def busy(self, description: str) -> None:
        self._progress.busy(description)

    def log(self, message: str) -> None:
        self._progress.log(message)


def _pulled_layer(snap: LocalSnapshot, parent: LocalSnapshot | None, parent_digest: str | None, hub: str) -> str | None:
    """The layer digest ``snap`` was pulled as from this hub, when its parent is that layer's parent too."""
    origin = snap.origin or {}
    if origin.get("hub") != hub or not origin.get("manifest_digest"):
        return None
    if parent is not None and parent_digest != (parent.origin or {}).get("manifest_digest"):
        return None
    return origin["manifest_digest"]


def _streaming() -> bool:
    """``FORKD_PUSH_STREAM=1``: upload frames while building. Off by default: on the 2 shared cores
    where it was measured it was slower (docs/benchmarks.md, "Hub: chunk upload…")."""
    return os.environ.get("FORKD_PUSH_STREAM", "0").strip() in ("1", "true", "yes")


__all__ = ["ChainPush", "LinkPushed", "PushResult", "push", "upload_part_bytes"]
