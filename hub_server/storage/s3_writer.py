"""Staged writes to S3: a buffer, then a multipart upload; ``commit`` completes, ``cancel`` aborts.

A writer buffers up to ``part_size`` bytes in memory. A commit below that is one ``PutObject``.
Beyond it the writer starts a multipart upload and sends each full buffer as a part, up to
:data:`PARTS_IN_FLIGHT` at once (memory stays under ``(PARTS_IN_FLIGHT + 1) × part_size``); commit
sends the rest as the last part and completes.

**Appends keep one multipart upload across writers** (an upload session's PATCH requests, on
any replica). An append writer's commit does not complete its multipart upload: it uploads
the full parts and puts the tail (under ``part_size``) as the object itself, with user metadata
:data:`CHECKPOINT_META` = ``"<upload id> <parts> <bytes in parts>"``: a **checkpoint**. The
next append writer resumes it (the parts from ``ListParts``, the tail read back into its
buffer), so each request sends only its own bytes: linear, where completing and copying the
object server-side on every request was quadratic. The object's size is parts + tail
(``S3Store.stat``); the first read, move or copy completes the upload (:func:`materialize`:
the tail becomes the last part) and the object is an ordinary one again. Parts a failed
request sent beyond the checkpoint are never listed in a completion (the next writer
overwrites them by number); cancelling a resumed writer keeps the checkpoint. A plain object
of 5 MiB or more is continued by copying it into the first part(s) server-side
(``UploadPartCopy``, pinned to its ETag), a smaller one is read into the buffer; either way
appended bytes stay invisible until commit.

:func:`purge_multipart_uploads` aborts multipart uploads under the store's prefix that have been
idle (no part since) for longer than asked: leftovers of crashed processes of any replica. An
upload a checkpoint names is an open upload session's, not abandoned: it is kept, and goes when
the session's object is deleted (the session finished, was cancelled or expired: GC).

Errors: as ``hub_server.storage.s3`` (``NoSuchUpload`` → ``WriterClosed``; a checkpoint whose parts
are gone → ``StorageError``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .base import BlobInfo, BlobWriter
from .errors import StorageError, WriterClosed

if TYPE_CHECKING:
    from .s3 import S3Store

__all__ = [
    "CHECKPOINT_META",
    "PARTS_IN_FLIGHT",
    "Checkpoint",
    "S3Writer",
    "checkpoint_of",
    "materialize",
    "purge_multipart_uploads",
]

PARTS_IN_FLIGHT = 4
#: User metadata (``x-amz-meta-…``) of a staged object whose leading bytes are parts of an open upload.
CHECKPOINT_META = "forkd-staged-parts"


@dataclass(frozen=True)
class Checkpoint:
    """The object is the tail; ``parts`` parts (``part_bytes`` bytes) of ``upload_id`` come before it."""

    upload_id: str
    parts: int
    part_bytes: int

    def encode(self) -> dict[str, str]:
        return {CHECKPOINT_META: f"{self.upload_id} {self.parts} {self.part_bytes}"}


def checkpoint_of(head: dict[str, Any]) -> Checkpoint | None:
    """The checkpoint a ``HeadObject``/``GetObject`` answer records, or None for an ordinary object."""
    raw = (head.get("Metadata") or {}).get(CHECKPOINT_META)
    if raw is None:
        return None
    try:
        upload_id, parts, part_bytes = raw.rsplit(" ", 2)
        return Checkpoint(upload_id, int(parts), int(part_bytes))
    except ValueError:
        raise StorageError(f"unreadable staged-upload checkpoint {raw[:100]!r}") from None


async def _listed_parts(store: S3Store, key: str, checkpoint: Checkpoint) -> list[dict[str, Any]]:
    """Parts 1..checkpoint.parts of the checkpoint's upload, as ``CompleteMultipartUpload`` wants them.

    Raises: WriterClosed (the upload is gone), StorageError (parts missing or of other sizes).
    """
    name = store.object_name(key)
    parts: list[dict[str, Any]] = []
    marker = 0
    while True:
        page = await store.call(
            key,
            store.client.list_parts,
            Bucket=store.bucket,
            Key=name,
            UploadId=checkpoint.upload_id,
            PartNumberMarker=marker,
        )
        parts.extend(
            {"PartNumber": part["PartNumber"], "ETag": part["ETag"], "Size": int(part["Size"])}
            for part in page.get("Parts", [])
            if part["PartNumber"] <= checkpoint.parts
        )
        if not page.get("IsTruncated"):
            break
        marker = int(page["NextPartNumberMarker"])
    parts.sort(key=lambda p: p["PartNumber"])
    if [p["PartNumber"] for p in parts] != list(range(1, checkpoint.parts + 1)) or sum(
        p.pop("Size") for p in parts
    ) != checkpoint.part_bytes:
        raise StorageError(f"the staged upload for {key!r} lost parts of its checkpoint")
    return parts


async def materialize(store: S3Store, key: str, head: dict[str, Any], checkpoint: Checkpoint) -> None:
    """Complete a checkpointed upload: its parts, then the tail as the last part, become the object.

    Raises: WriterClosed when someone else completed it meanwhile (read it again), storage errors.
    """
    name = store.object_name(key)
    parts = await _listed_parts(store, key, checkpoint)
    tail = b""
    if int(head["ContentLength"]):
        response = await store.call(key, store.client.get_object, Bucket=store.bucket, Key=name, IfMatch=head["ETag"])
        tail = await store.call(key, response["Body"].read)
    if tail or not parts:
        number = checkpoint.parts + 1
        sent = await store.call(
            key,
            store.client.upload_part,
            Bucket=store.bucket,
            Key=name,
            UploadId=checkpoint.upload_id,
            PartNumber=number,
            Body=tail,
        )
        parts.append({"PartNumber": number, "ETag": sent["ETag"]})
    await store.call(
        key,
        store.client.complete_multipart_upload,
        Bucket=store.bucket,
        Key=name,
        UploadId=checkpoint.upload_id,
        MultipartUpload={"Parts": parts},
    )


class S3Writer(BlobWriter):
    """See the module docstring. ``upload_id`` is set once a multipart upload exists."""

    def __init__(self, store: S3Store, key: str, *, size: int = 0, append: bool = False) -> None:
        super().__init__(key, append=append, size=size)
        self._store = store
        self._name = store.object_name(key)
        self._buffer = bytearray()
        self._parts: list[dict[str, Any]] = []
        self._in_flight: list[asyncio.Task[None]] = []
        self.upload_id: str | None = None
        self._resumed = False  # continuing an upload a previous writer checkpointed: never abort it
        self.idle_since = datetime.now(UTC)
        self._purged = False
        store.track(self, add=True)

    @classmethod
    async def appending(
        cls, store: S3Store, key: str, size: int, etag: str, checkpoint: Checkpoint | None = None
    ) -> S3Writer:
        """A writer continuing the ``size``-byte object at ``key`` (version ``etag``), resuming
        ``checkpoint`` when the object is one."""
        from .s3 import MAX_COPY_PART, MIN_PART

        writer = cls(store, key, size=size, append=True)
        if checkpoint is not None:
            try:
                writer._parts = await _listed_parts(store, key, checkpoint)
                if size > checkpoint.part_bytes:
                    response = await store.call(
                        key, store.client.get_object, Bucket=store.bucket, Key=writer._name, IfMatch=etag
                    )
                    writer._buffer += await store.call(key, response["Body"].read)
            except BaseException:
                writer._fail("its checkpoint could not be resumed")
                store.track(writer, add=False)
                raise
            writer.upload_id, writer._resumed = checkpoint.upload_id, True
            return writer
        try:
            if size < MIN_PART:
                if size:
                    response = await store.call(
                        key, store.client.get_object, Bucket=store.bucket, Key=writer._name, IfMatch=etag
                    )
                    writer._buffer += await store.call(key, response["Body"].read)
                return writer
            await writer._start()
            for start in range(0, size, MAX_COPY_PART):
                end = min(size, start + MAX_COPY_PART) - 1
                if size - (end + 1) and size - (end + 1) < MIN_PART:  # keep the next copy part >= 5 MiB
                    end = size - MIN_PART - 1
                part = len(writer._parts) + 1
                copied = await store.call(
                    key,
                    store.client.upload_part_copy,
                    Bucket=store.bucket,
                    Key=writer._name,
                    UploadId=writer.upload_id,
                    PartNumber=part,
                    CopySource={"Bucket": store.bucket, "Key": writer._name},
                    CopySourceIfMatch=etag,
                    CopySourceRange=f"bytes={start}-{end}",
                )
                writer._parts.append({"PartNumber": part, "ETag": copied["CopyPartResult"]["ETag"]})
        except BaseException:
            await writer._abort()
            raise
        return writer

    def purge(self) -> bool:
        """Break this writer (``purge_staging``); False if it already finished."""
        if self.closed:
            return False
        self._purged = True
        self._fail("its staged bytes were purged as abandoned")
        self._buffer = bytearray()
        self._store.track(self, add=False)
        return True

    async def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.idle_since = datetime.now(UTC)
        self._buffer += data
        part_size = self._store.config.part_size
        while len(self._buffer) >= part_size:
            if self.upload_id is None:
                await self._start()
            piece = bytes(self._buffer[:part_size])
            del self._buffer[:part_size]
            await self._send(piece)

    async def _commit(self) -> BlobInfo:
        if self._purged:
            raise WriterClosed(f"the staged upload for {self.key!r} was purged")
        store = self._store
        try:
            if self.upload_id is None:
                await store.call(
                    self.key, store.client.put_object, Bucket=store.bucket, Key=self._name, Body=bytes(self._buffer)
                )
            elif self.append:  # checkpoint: full parts sent, the tail becomes the object (module docstring)
                await self._drain()
                checkpoint = Checkpoint(self.upload_id, len(self._parts), self.size - len(self._buffer))
                await store.call(
                    self.key,
                    store.client.put_object,
                    Bucket=store.bucket,
                    Key=self._name,
                    Body=bytes(self._buffer),
                    Metadata=checkpoint.encode(),
                )
                self.upload_id = None
            else:
                if self._buffer or not (self._parts or self._in_flight):
                    await self._send(bytes(self._buffer))
                await self._drain()
                parts = sorted(self._parts, key=lambda p: p["PartNumber"])
                await store.call(
                    self.key,
                    store.client.complete_multipart_upload,
                    Bucket=store.bucket,
                    Key=self._name,
                    UploadId=self.upload_id,
                    MultipartUpload={"Parts": parts},
                )
                self.upload_id = None
        finally:
            self._buffer = bytearray()
        store.track(self, add=False)
        return await store._stat(self.key)  # noqa: SLF001 - the store's own hook, the key is valid

    async def _cancel(self) -> None:
        self._buffer = bytearray()
        self._store.track(self, add=False)
        await self._abort()

    # -- multipart ---------------------------------------------------------------------------

    async def _start(self) -> None:
        store = self._store
        created = await store.call(self.key, store.client.create_multipart_upload, Bucket=store.bucket, Key=self._name)
        self.upload_id = created["UploadId"]

    async def _send(self, piece: bytes) -> None:
        """Upload ``piece`` as the next part, in the background; at most PARTS_IN_FLIGHT pending."""
        number = len(self._parts) + len(self._in_flight) + 1
        while len(self._in_flight) >= PARTS_IN_FLIGHT:
            done = self._in_flight.pop(0)
            await done
        self._in_flight.append(asyncio.ensure_future(self._upload_part(number, piece)))

    async def _upload_part(self, number: int, piece: bytes) -> None:
        store = self._store
        sent = await store.call(
            self.key,
            store.client.upload_part,
            Bucket=store.bucket,
            Key=self._name,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=piece,
        )
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})
        self.idle_since = datetime.now(UTC)

    async def _drain(self) -> None:
        pending, self._in_flight = self._in_flight, []
        results = await asyncio.gather(*pending, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _abort(self) -> None:
        with contextlib.suppress(Exception):
            await self._drain()
        if self.upload_id is None or self._resumed:  # a resumed upload keeps its checkpoint
            return
        store, upload_id, self.upload_id = self._store, self.upload_id, None
        with contextlib.suppress(WriterClosed):  # already aborted (purged)
            await store.call(
                self.key, store.client.abort_multipart_upload, Bucket=store.bucket, Key=self._name, UploadId=upload_id
            )


async def purge_multipart_uploads(store: S3Store, cutoff: datetime) -> int:
    """Abort multipart uploads under the store's prefix with no activity since ``cutoff``; count them.

    Raises: StorageUnavailable, StorageError.
    """
    prefix = store.object_name("")
    kwargs: dict[str, Any] = {"Bucket": store.bucket, "Prefix": prefix}
    stale: list[tuple[str, str]] = []
    while True:
        page = await store.call(prefix or "(bucket)", store.client.list_multipart_uploads, **kwargs)
        for upload in page.get("Uploads", []):
            if (
                _aware(upload["Initiated"]) <= cutoff
                and await _idle_since(store, upload) <= cutoff
                and not await _checkpointed(store, upload["Key"], upload["UploadId"])
            ):
                stale.append((upload["Key"], upload["UploadId"]))  # noqa: PERF401 - the filter awaits per upload
        if not page.get("IsTruncated"):
            break
        kwargs.update(KeyMarker=page.get("NextKeyMarker"), UploadIdMarker=page.get("NextUploadIdMarker"))
    purged = 0
    for name, upload_id in stale:
        try:
            await store.call(
                name, store.client.abort_multipart_upload, Bucket=store.bucket, Key=name, UploadId=upload_id
            )
        except WriterClosed:
            continue  # completed or aborted meanwhile
        purged += 1
    return purged


async def _checkpointed(store: S3Store, name: str, upload_id: str) -> bool:
    """Whether object ``name`` is a checkpoint of upload ``upload_id``: an upload session's staged
    bytes between requests, which go when the session does (``delete``), not as abandoned staging."""
    try:
        head = await store.call(name, store.client.head_object, Bucket=store.bucket, Key=name)
    except StorageError:  # BlobNotFound included: no object, so no checkpoint
        return False
    checkpoint = checkpoint_of(head)
    return checkpoint is not None and checkpoint.upload_id == upload_id


async def _idle_since(store: S3Store, upload: dict[str, Any]) -> datetime:
    """When the upload last received a part (its start if none)."""
    latest = _aware(upload["Initiated"])
    try:
        parts = await store.call(
            upload["Key"], store.client.list_parts, Bucket=store.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
        )
    except (WriterClosed, StorageError):
        return latest
    for part in parts.get("Parts", []):
        latest = max(latest, _aware(part["LastModified"]))
    return latest


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
