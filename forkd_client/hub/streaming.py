"""Uploading a layer's new frames while the layer is still being built.

The layer builder (manifest/layer.py) hands every frame it appends to a data blob to
:meth:`FrameUploader.frame`, on the building thread; the uploader queues it for its own thread.
That thread, per data blob, opens an upload session and, for each part's worth of frames
(``upload_part_bytes``), asks the hub which of them it holds (``frames/query``), declares them on
the session (``PUT …/blobs/uploads/<id>/recipe`` with ``from``: the recipe in parts, docs/http-api.md)
and PATCHes the bytes of the others, which the hub verifies as they stream in. So compressing,
uploading and the hub's verification overlap. When the build is done the blobs' digests are known
and :mod:`.push` finishes each session with the whole recipe. Opt-in (``FORKD_PUSH_STREAM=1``):
with client and hub on the same two shared cores it was slower than uploading after the build
(both sides are CPU-bound there; docs/benchmarks.md), it is meant for a client and a hub on
machines of their own.

A hub that predates declared recipes (405 on the first declaration) stops the streaming: the
blobs are then uploaded after the build, as before. An interrupted streamed upload is not
resumed: the next push streams that blob again from its first frame (the abandoned session
expires on the hub).

Errors: :meth:`FrameUploader.frame` and :meth:`FrameUploader.close` raise what the upload thread
met (forkd_client.hub.errors: HubError family), so a refused upload stops the build too.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from manifest import mediatypes as mt
from manifest.layer import Frame

from .repository import RepositoryClient

__all__ = ["FrameUploader", "StreamedBlob"]

#: Frames queued between the building thread and the upload thread (bounds the memory held).
QUEUE_FRAMES = 1024
_DONE = object()


@dataclass
class StreamedBlob:
    """One data blob's session: its frames declared and their new bytes uploaded, in order."""

    location: str
    inline: set[str] = field(default_factory=set)
    declared: int = 0
    sent: int = 0
    held_bytes: int = 0


class FrameUploader:
    """Streams frames to the hub on a thread of its own (see the module docstring)."""

    def __init__(self, repo: RepositoryClient, part_bytes: int) -> None:
        self._repo = repo
        self._part = part_bytes
        self._queue: queue.Queue[object] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._blobs: dict[int, StreamedBlob] = {}
        self._error: BaseException | None = None
        self._unsupported = False
        self._thread = threading.Thread(target=self._run, name="frame-upload", daemon=True)
        self._thread.start()

    def frame(self, blob: int, frame: Frame, data: bytes) -> None:
        """Queue frame ``frame`` (bytes ``data``) of the layer's ``blob``-th data blob. Raises the
        upload thread's error, so a build stops as soon as its upload cannot go on."""
        if self._error is not None:
            raise self._error
        if not self._unsupported:
            self._queue.put((blob, frame, data))

    def close(self) -> dict[int, StreamedBlob]:
        """Wait for every queued frame to be uploaded; return the streamed blobs by number (none
        when the hub cannot take declared recipes). Raises the upload thread's error."""
        self._queue.put(_DONE)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return {} if self._unsupported else self._blobs

    def abort(self) -> None:
        """Stop (the build failed): the thread finishes what it is sending and exits."""
        self._unsupported = True
        self._queue.put(_DONE)
        self._thread.join()

    def _run(self) -> None:
        pending: list[tuple[Frame, bytes]] = []
        size = 0
        current: int | None = None
        while (item := self._queue.get()) is not _DONE:
            if self._error is not None or self._unsupported:
                continue  # keep draining, so the building thread never blocks on a full queue
            assert isinstance(item, tuple)
            blob: int = item[0]
            frame: Frame = item[1]
            data: bytes = item[2]
            try:
                if current is not None and blob != current and pending:
                    self._send(current, pending)
                    pending, size = [], 0
                current = blob
                pending.append((frame, data))
                size += len(data)
                if size >= self._part:
                    self._send(blob, pending)
                    pending, size = [], 0
            except BaseException as e:  # noqa: BLE001 — handed to the building thread
                self._error = e
        if pending and current is not None and self._error is None and not self._unsupported:
            try:
                self._send(current, pending)
            except BaseException as e:  # noqa: BLE001 — raised by close()
                self._error = e

    def _send(self, blob: int, frames: list[tuple[Frame, bytes]]) -> None:
        """Declare ``frames`` on the blob's session and upload the bytes of those the hub lacks."""
        repo = self._repo
        state = self._blobs.get(blob)
        if state is None:
            state = StreamedBlob(repo.start_upload())
        held = repo.query_frames([f.digest for f, _ in frames])
        part = {
            "mediaType": mt.RECIPE,
            "from": state.declared,
            "frames": [[f.digest, f.chunk, f.raw_length, f.length, f.digest not in held] for f, _ in frames],
        }
        if not repo.declare_recipe(state.location, part):
            self._unsupported = True  # an older hub: push uploads after the build instead
            repo.hub.cancel_upload(state.location)
            return
        self._blobs[blob] = state
        state.declared += len(frames)
        payload = b"".join(data for f, data in frames if f.digest not in held)
        state.inline.update(f.digest for f, _ in frames if f.digest not in held)
        state.held_bytes += sum(f.length for f, _ in frames if f.digest in held)
        if payload:
            state.location = repo.hub.upload_chunk(state.location, payload, state.sent)
            state.sent += len(payload)
