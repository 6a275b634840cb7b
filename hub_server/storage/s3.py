"""``S3Store``: keys are objects in one S3 bucket (AWS, Ceph RGW, SeaweedFS, MinIO …), through boto3.

Spec (``storage.factory``)::

    s3 bucket=snapshots endpoint=http://127.0.0.1:8333 region=us-east-1 [prefix=hub]
       [public_endpoint=https://s3.example.com] [part_size=16MiB] [pool=64]

Credentials come from boto3's standard chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, instance roles …), never from the spec. One boto3 client per store (the
composition root builds one store per process), with ``pool`` HTTP connections and botocore's
``standard`` retry mode (throttling and 5xx retried with back-off). Every boto3 call runs in a
worker thread (``anyio.to_thread``), never on the event loop.

Layout: key ``k`` is the object ``<prefix>/k`` (or ``k`` without a prefix). Staged writes are
buffered in memory up to ``part_size`` and become a multipart upload beyond that
(``hub_server.storage.s3_writer``): ``commit`` completes it, ``cancel`` aborts it, and
``purge_staging`` aborts multipart uploads under the prefix idle for longer than asked (crash
leftovers of any replica). Appends keep one multipart upload across writers: an append's
commit is a checkpoint (the parts stay uploaded, the object holds the tail and says so in
its metadata), the next append resumes it, and the first read, move or copy completes it
(``s3_writer``); appended bytes stay invisible until commit (``append_isolated``). ``move`` is
copy then delete (``atomic_move=False``). A stream is one ranged GET pinned to the ETag seen
when it opened (``If-Match``), so it reads that version. ``redirect_url`` presigns a GET (or HEAD) against ``public_endpoint`` (default ``endpoint``).

Errors: botocore errors are translated here (``NoSuchKey``/404 → ``BlobNotFound``,
``NoSuchUpload`` → ``WriterClosed``, quota/507 → ``StorageFull``, connection failures,
throttling and 5xx that outlived the retries → ``StorageUnavailable``, the rest → ``StorageError``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio.to_thread

from .base import BlobInfo, BlobStore, BlobStream, BlobWriter, Capabilities, RedirectMethod, checked_range
from .errors import BlobNotFound, InvalidRange, StorageError, StorageFull, StorageUnavailable, WriterClosed
from .s3_writer import checkpoint_of, materialize

__all__ = ["S3Config", "S3Store", "translate"]

MIN_PART = 5 << 20
"""S3's smallest part (all but the last)."""
MAX_COPY_PART = 5 << 30
"""S3's largest part copied server-side in one UploadPartCopy."""
DEFAULT_PART = 16 << 20

_R = TypeVar("_R")
_OPEN_ATTEMPTS = 5
_NOT_FOUND = {"NoSuchKey", "404", "NotFound", "NoSuchVersion"}
_FULL = {"QuotaExceeded", "XMinioStorageFull", "InsufficientStorage", "EntityTooLarge", "507"}
_UNAVAILABLE = {
    "SlowDown",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
    "InternalError",
    "RequestTimeout",
    "NoSuchBucket",
    "AccessDenied",
    "403",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
}


@dataclass(frozen=True)
class S3Config:
    """The spec's parameters, checked."""

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    prefix: str = ""
    public_endpoint: str | None = None
    part_size: int = DEFAULT_PART
    pool: int = 64

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> S3Config:
        """Raises: ValueError naming a bad parameter."""
        from hub_server.settings import SettingsError, parse_size

        prefix = params.get("prefix", "").strip("/")
        try:
            part_size = parse_size(params["part_size"]) if "part_size" in params else DEFAULT_PART
            pool = int(params.get("pool", "64"))
        except (SettingsError, ValueError) as e:
            raise ValueError(f"s3: {e}") from None
        if not MIN_PART <= part_size <= MAX_COPY_PART:
            raise ValueError(f"s3: part_size must be between 5MiB and 5GiB, got {params.get('part_size')}")
        if not 1 <= pool <= 1024:
            raise ValueError(f"s3: pool must be between 1 and 1024, got {pool}")
        for name in ("endpoint", "public_endpoint"):
            value = params.get(name)
            if value is not None and not value.startswith(("http://", "https://")):
                raise ValueError(f"s3: {name} must be an http:// or https:// URL, got {value!r}")
        return cls(
            bucket=params["bucket"],
            endpoint=params.get("endpoint"),
            region=params.get("region"),
            prefix=prefix,
            public_endpoint=params.get("public_endpoint"),
            part_size=part_size,
            pool=pool,
        )


class _Replaced(StorageError):
    """The object changed between two requests (``PreconditionFailed`` on ``If-Match``)."""


def translate(exc: BaseException, key: str) -> StorageError:
    """A botocore/boto3 error raised while handling ``key``, in the storage vocabulary."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code == "NoSuchUpload":
            return WriterClosed(f"the staged upload for {key!r} is gone (purged or aborted)")
        if code in _NOT_FOUND or (status == "404" and code != "NoSuchBucket"):
            return BlobNotFound(key)
        if code == "PreconditionFailed" or status == "412":
            return _Replaced(f"{key!r} was replaced while being opened")
        if code == "InvalidRange" or status == "416":
            return InvalidRange(key, 0, None, None)
        if code in _FULL or status == "507":
            return StorageFull(f"object store refused {key!r}: {code} {error.get('Message', '')}".strip())
        if code in _UNAVAILABLE or status in _UNAVAILABLE:
            return StorageUnavailable(f"object store error on {key!r}: {code} {error.get('Message', '')}".strip())
        return StorageError(f"object store error on {key!r}: {code} {error.get('Message', '')}".strip())
    if isinstance(exc, NoCredentialsError):
        return StorageUnavailable(
            f"no S3 credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile): {exc}"
        )
    if isinstance(exc, BotoCoreError | OSError):
        return StorageUnavailable(f"object store unreachable while handling {key!r}: {exc}")
    return StorageError(f"object store error on {key!r}: {exc!r}")


class S3Store(BlobStore):
    """Blob store in ``config.bucket``. Building it opens no connection (the first call does)."""

    name = "s3"
    capabilities = Capabilities(
        supports_redirect=True,
        atomic_move=False,
        supports_append=True,
        append_isolated=True,
        enforces_key_tree=False,
    )

    def __init__(self, config: S3Config) -> None:
        super().__init__()
        import boto3
        from botocore.config import Config
        from botocore.handlers import add_expect_header

        self.config = config
        self.bucket = config.bucket
        self._prefix = config.prefix + "/" if config.prefix else ""
        session = boto3.session.Session()
        botocore_config = Config(
            retries={"mode": "standard", "max_attempts": 5},
            max_pool_connections=config.pool,
            connect_timeout=10,
            read_timeout=120,
            signature_version="s3v4",
            s3={"addressing_style": "path"},
        )
        self.client = session.client(
            "s3", endpoint_url=config.endpoint, region_name=config.region, config=botocore_config
        )
        # Every body this store sends is bytes already in memory, which botocore writes with the headers in
        # one send: ``Expect: 100-continue`` saves nothing, and against SeaweedFS under load its late
        # "100 Continue" left a response unparsed and the PUT hung for the whole read timeout (a PATCH took
        # 120 s in tests/e2e/test_operations_shared_base.py). Plain PUTs, as most S3 clients send them.
        self.client.meta.events.unregister("before-call.s3", add_expect_header)
        self._presigner = (
            self.client
            if not config.public_endpoint
            else session.client(
                "s3", endpoint_url=config.public_endpoint, region_name=config.region, config=botocore_config
            )
        )
        self._writers: set[Any] = set()  # open writers of this process (purge_staging breaks idle ones)
        self._writers_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Store(bucket={self.bucket!r}, prefix={self.config.prefix!r}, endpoint={self.config.endpoint!r})"

    # -- helpers shared with the writer ------------------------------------------------------

    def object_name(self, key: str) -> str:
        return self._prefix + key

    async def call(self, key: str, method: Callable[..., _R], **kwargs: Any) -> _R:
        """Run one blocking boto3 call in a worker thread, translating its errors for ``key``."""
        try:
            return await anyio.to_thread.run_sync(functools.partial(method, **kwargs))
        except Exception as exc:  # noqa: BLE001 - every foreign error is translated at this boundary
            raise translate(exc, key) from exc

    async def head(self, key: str) -> dict[str, Any]:
        return await self.call(key, self.client.head_object, Bucket=self.bucket, Key=self.object_name(key))

    def track(self, writer: Any, *, add: bool) -> None:
        with self._writers_lock:
            (self._writers.add if add else self._writers.discard)(writer)

    # -- hooks -------------------------------------------------------------------------------

    async def _stat(self, key: str) -> BlobInfo:
        head = await self.head(key)
        checkpoint = checkpoint_of(head)
        staged = checkpoint.part_bytes if checkpoint is not None else 0
        return BlobInfo(key, staged + int(head["ContentLength"]), _aware(head["LastModified"]))

    async def complete_head(self, key: str) -> dict[str, Any]:
        """``HeadObject`` of ``key`` once it is an ordinary object: a checkpointed append
        (``s3_writer``) is completed first, so its bytes can be read or copied."""
        for _ in range(_OPEN_ATTEMPTS):
            head = await self.head(key)
            checkpoint = checkpoint_of(head)
            if checkpoint is None:
                return head
            try:
                await materialize(self, key, head, checkpoint)
            except (WriterClosed, _Replaced):
                continue  # completed by someone else meanwhile: look again
        raise StorageError(f"the staged upload for {key!r} kept changing while being completed")

    async def _open(self, key: str, offset: int, length: int | None, chunk_size: int) -> BlobStream:
        for attempt in range(_OPEN_ATTEMPTS):
            head = await self.complete_head(key)
            selected = checked_range(key, int(head["ContentLength"]), offset, length)
            if selected == 0:
                return _S3Stream(self, key, offset, 0, chunk_size, None)
            try:
                response = await self.call(
                    key,
                    self.client.get_object,
                    Bucket=self.bucket,
                    Key=self.object_name(key),
                    IfMatch=head["ETag"],
                    Range=f"bytes={offset}-{offset + selected - 1}",
                )
            except _Replaced:
                if attempt + 1 == _OPEN_ATTEMPTS:
                    raise
                continue  # replaced between HEAD and GET: read the new version
            return _S3Stream(self, key, offset, selected, chunk_size, response["Body"])
        raise AssertionError("unreachable")

    async def _writer(self, key: str, append: bool) -> BlobWriter:
        from .s3_writer import S3Writer

        if not append:
            return S3Writer(self, key)
        head = await self.head(key)
        checkpoint = checkpoint_of(head)
        size = int(head["ContentLength"]) + (checkpoint.part_bytes if checkpoint is not None else 0)
        return await S3Writer.appending(self, key, size, head["ETag"], checkpoint)

    async def _delete(self, key: str) -> None:
        head = await self.head(key)  # S3 deletes are idempotent; the contract wants BlobNotFound
        await self.call(key, self.client.delete_object, Bucket=self.bucket, Key=self.object_name(key))
        checkpoint = checkpoint_of(head)
        if checkpoint is not None:  # a checkpointed append's parts go with it
            with contextlib.suppress(WriterClosed):
                await self.call(
                    key,
                    self.client.abort_multipart_upload,
                    Bucket=self.bucket,
                    Key=self.object_name(key),
                    UploadId=checkpoint.upload_id,
                )

    async def _move(self, src: str, dst: str) -> None:
        from boto3.s3.transfer import TransferConfig

        await self.complete_head(src)
        source = {"Bucket": self.bucket, "Key": self.object_name(src)}
        transfer = TransferConfig(multipart_threshold=MAX_COPY_PART, multipart_chunksize=self.config.part_size * 8)
        await self.call(
            dst, self.client.copy, CopySource=source, Bucket=self.bucket, Key=self.object_name(dst), Config=transfer
        )
        with contextlib.suppress(BlobNotFound):  # moved concurrently by someone else: dst holds the bytes either way
            await self._delete(src)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        async for name, _ in self._objects(prefix):
            yield name

    async def _objects(self, prefix: str) -> AsyncIterator[tuple[str, int]]:
        """``(key, size)`` of every object selected by ``prefix``, in string order.

        Walks one "directory" (``Delimiter="/"``) at a time and sorts each level itself, the way
        the filesystem store does: S3 implementations disagree on listing order (SeaweedFS lists
        directories first), and memory stays bounded by one directory's entries.
        """
        if prefix:
            with contextlib.suppress(BlobNotFound):
                yield prefix, (await self._stat(prefix)).size  # "a/b" sorts before "a/b/…"
        pending: list[tuple[str, int | None]] = [(prefix + "/" if prefix else "", None)]
        while pending:
            name, size = pending.pop()
            if size is not None:
                yield name, size
                continue
            children = await self._children(name)
            pending.extend(reversed(children))

    async def _children(self, directory: str) -> list[tuple[str, int | None]]:
        """Objects ``(key, size)`` and sub-directories ``(dir/, None)`` right under ``directory``, sorted."""
        entries: list[tuple[str, int | None]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._prefix + directory, "Delimiter": "/"}
        while True:
            page = await self.call(directory or "(root)", self.client.list_objects_v2, **kwargs)
            for item in page.get("Contents", []):
                key = item["Key"][len(self._prefix) :]
                if key and key != directory and not (not directory and key.startswith("_")):
                    entries.append((key, int(item["Size"])))
            for common in page.get("CommonPrefixes", []):
                sub = common["Prefix"][len(self._prefix) :]
                if sub and not (not directory and sub.startswith("_")):
                    entries.append((sub, None))
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        entries.sort(key=lambda entry: entry[0])  # a directory "a/" sorts as its keys "a/…" do
        return entries

    async def _redirect_url(self, key: str, expires_in: int, method: RedirectMethod) -> str | None:
        operation = "get_object" if method == "GET" else "head_object"
        return await self.call(
            key,
            self._presigner.generate_presigned_url,
            ClientMethod=operation,
            Params={"Bucket": self.bucket, "Key": self.object_name(key)},
            ExpiresIn=expires_in,
        )

    async def _usage(self) -> int:
        return sum([size async for _, size in self._objects("")])

    async def _purge_staging(self, older_than: timedelta) -> int:
        from .s3_writer import purge_multipart_uploads

        cutoff = datetime.now(UTC) - older_than
        with self._writers_lock:
            local = list(self._writers)
        purged = 0
        for writer in local:
            if writer.idle_since <= cutoff and writer.upload_id is None and writer.purge():
                purged += 1  # buffered in memory only: nothing on the server to abort
        return purged + await purge_multipart_uploads(self, cutoff)

    async def _close(self) -> None:
        await anyio.to_thread.run_sync(self.client.close)
        if self._presigner is not self.client:
            await anyio.to_thread.run_sync(self._presigner.close)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class _S3Stream(BlobStream):
    """One ranged GET's body, read ``size`` bytes at a time in worker threads."""

    def __init__(self, store: S3Store, key: str, offset: int, length: int, chunk_size: int, body: Any) -> None:
        super().__init__(key, offset, length, chunk_size)
        self._store = store
        self._body = body

    async def _read_at(self, position: int, size: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < size:
            piece = await self._store.call(self.key, self._body.read, amt=size - got)
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        return b"".join(parts)

    async def _release(self) -> None:
        if self._body is not None:
            await anyio.to_thread.run_sync(self._body.close)
