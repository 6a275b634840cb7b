"""S3Store passes the shared suite against a real SeaweedFS, plus S3-specific checks."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import httpx
import pytest

from hub_server.storage.base import BlobStore
from hub_server.storage.errors import BlobNotFound, StorageUnavailable, WriterClosed
from hub_server.storage.factory import create_store
from hub_server.storage.s3 import S3Store
from hub_server.storage.testing import BlobStoreConformance, collect

SMALL_PARTS = "part_size=5MiB"


def _open_multipart(store: S3Store) -> int:
    listing = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.object_name(""))
    return len(listing.get("Uploads", []))


class TestS3Store(BlobStoreConformance):
    @pytest.fixture
    async def store(self, seaweedfs) -> AsyncIterator[BlobStore]:
        store = create_store(f"{seaweedfs.storage_spec()} {SMALL_PARTS}")
        yield store
        await store.close()

    async def staged_count(self, store: BlobStore) -> int:
        assert isinstance(store, S3Store)
        return len(store._writers) + _open_multipart(store)  # noqa: SLF001


pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(seaweedfs) -> AsyncIterator[S3Store]:
    store = create_store(f"{seaweedfs.storage_spec(prefix=f'hub/{uuid.uuid4().hex}')} {SMALL_PARTS}")
    assert isinstance(store, S3Store)
    yield store
    await store.close()


async def test_large_writes_are_multipart_and_appends_copy_server_side(store: S3Store):
    data = os.urandom(12 << 20)
    async with store.writer("big") as writer:
        await writer.write(data[: 6 << 20])
        assert writer.upload_id is not None and _open_multipart(store) == 1  # staged, invisible
        assert not await store.exists("big")
        await writer.write(data[6 << 20 :])
        await writer.commit()
    assert _open_multipart(store) == 0
    assert await store.read("big") == data
    async with store.writer("big", append=True) as writer:
        assert writer.upload_id is not None  # the existing 12 MiB became part 1 by UploadPartCopy
        await writer.write(b"tail")
        assert await store.read("big", len(data) - 4) == data[-4:]  # isolated until commit
        await writer.commit()
    assert await store.read("big", len(data) - 4) == data[-4:] + b"tail"


async def test_writes_send_their_body_without_expect_100_continue(store: S3Store):
    """botocore's default ``Expect: 100-continue`` once made a PUT to SeaweedFS hang for the whole read
    timeout (its late "100 Continue" left the response unparsed); the store's bodies are in memory, so it
    sends plain PUTs, whole objects and multipart parts alike."""
    sent: list[tuple[str, str | None]] = []

    def record(request, **_: object) -> None:
        sent.append((request.method, request.headers.get("Expect")))

    store.client.meta.events.register("before-send.s3", record)
    await store.put("small", b"x" * 28)
    async with store.writer("big") as writer:
        await writer.write(os.urandom(12 << 20))
        await writer.commit()
    assert await store.read("small") == b"x" * 28
    puts = [expect for method, expect in sent if method == "PUT"]
    assert len(puts) >= 3 and puts == [None] * len(puts), sent


async def test_keys_live_under_the_prefix(store: S3Store):
    await store.put("a/b", b"x")
    listing = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.object_name(""))
    assert [o["Key"] for o in listing["Contents"]] == [store.object_name("a/b")]
    assert store.object_name("a/b").startswith("hub/") and store.object_name("a/b").endswith("/a/b")
    assert await collect(store.list()) == ["a/b"]


async def test_purge_staging_aborts_stale_multipart_uploads_of_any_process(store: S3Store):
    crashed = store.object_name("crashed")
    orphan = store.client.create_multipart_upload(Bucket=store.bucket, Key=crashed)["UploadId"]
    store.client.upload_part(Bucket=store.bucket, Key=crashed, UploadId=orphan, PartNumber=1, Body=b"x")
    writer = await store.writer("live")
    await writer.write(os.urandom(6 << 20))
    # its first part goes up in the background: an upload that receives a part after the cutoff is live, not
    # stale, so the part lands first (else the purge below may rightly keep it: a flake seen once in CI)
    await writer._drain()  # noqa: SLF001
    assert await store.purge_staging(timedelta(hours=1)) == 0
    assert await store.purge_staging(timedelta(0)) == 2
    assert _open_multipart(store) == 0
    with pytest.raises(WriterClosed):
        await writer.commit()


async def test_presigned_urls_serve_the_object_and_ranges_without_credentials(store: S3Store):
    await store.put("r/blob", bytes(range(256)))
    url = await store.redirect_url("r/blob", expires_in=60)
    assert url is not None and "X-Amz-Signature=" in url
    with httpx.Client() as http:
        assert http.get(url).content == bytes(range(256))
        ranged = http.get(url, headers={"Range": "bytes=10-19"})
        assert ranged.status_code == 206 and ranged.content == bytes(range(10, 20))
        tampered = url.replace("r%2Fblob", "r%2Fother").replace("r/blob", "r/other")
        assert http.get(tampered).status_code == 403


async def test_missing_bucket_or_server_is_unavailable(seaweedfs):
    missing = create_store(f"s3 bucket=does-not-exist-{os.getpid()} endpoint={seaweedfs.endpoint} region=us-east-1")
    with pytest.raises(StorageUnavailable):
        await missing.put("k", b"x")
    await missing.close()
    down = create_store("s3 bucket=b endpoint=http://127.0.0.1:9 region=us-east-1 pool=2")
    with pytest.raises(StorageUnavailable):
        await down.stat("k")
    await down.close()


async def test_missing_key_in_a_prefixed_store(store: S3Store):
    with pytest.raises(BlobNotFound):
        await store.read("nope")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("s3", r"needs parameter\(s\) bucket"),
        ("s3 bucket=b part_size=1MiB", "part_size must be between 5MiB and 5GiB"),
        ("s3 bucket=b endpoint=localhost:8333", "endpoint must be an http:// or https:// URL"),
        ("s3 bucket=b pool=0", "pool must be between 1 and 1024"),
    ],
)
def test_bad_specs_name_the_parameter(spec, message):
    with pytest.raises(ValueError, match=message):
        create_store(spec)


@pytest.mark.parametrize("size", [5 << 20, 10 << 20])
async def test_a_write_of_whole_parts_commits_without_an_empty_part(store: S3Store, size: int):
    data = os.urandom(size)  # the last full part is still in flight when commit starts
    await store.put("uploads/u", b"")
    with anyio.fail_after(60):  # an empty trailing part made SeaweedFS hang instead of failing
        async with store.writer("uploads/u", append=True) as writer:
            await writer.write(data)
            await writer.commit()
    assert await store.read("uploads/u") == data
    assert _open_multipart(store) == 0


def _count_calls(store: S3Store, operation: str) -> list[int]:
    """A counter of ``operation`` requests this store's boto3 client sends (a botocore event hook)."""
    seen = [0]

    def hook(**_: object) -> None:
        seen[0] += 1

    store.client.meta.events.register(f"before-call.s3.{operation}", hook)
    return seen


async def test_appends_resume_one_multipart_upload_instead_of_copying(seaweedfs, store: S3Store):
    """An upload session's PATCHes: each append sends only its own bytes (no server-side copy,
    no completion), any replica resumes the checkpoint, and the first read completes it."""
    copies, completions = _count_calls(store, "UploadPartCopy"), _count_calls(store, "CompleteMultipartUpload")
    other = create_store(f"{seaweedfs.storage_spec(prefix=store.config.prefix)} {SMALL_PARTS}")  # another replica
    assert isinstance(other, S3Store)
    pieces = [os.urandom(n) for n in (7 << 20, 3 << 20, 6 << 20, 1234)]
    await store.put("uploads/s", b"")
    expected = b""
    for i, piece in enumerate(pieces):
        replica = (store, other)[i % 2]
        async with replica.writer("uploads/s", append=True) as writer:
            assert writer.size == len(expected)
            await writer.write(piece)
            await writer.commit()
        expected += piece
        assert (await store.stat("uploads/s")).size == len(expected)
    head = store.client.head_object(Bucket=store.bucket, Key=store.object_name("uploads/s"))
    assert head["ContentLength"] < 5 << 20  # the object holds only the tail: the parts wait in the upload
    assert _open_multipart(store) == 1
    assert copies[0] == 0 and completions[0] == 0

    failed = await store.writer("uploads/s", append=True)  # a request that dies after sending a part
    await failed.write(os.urandom(6 << 20))
    await failed.cancel()
    assert (await other.stat("uploads/s")).size == len(expected) and _open_multipart(store) == 1

    assert await other.read("uploads/s") == expected  # completes the upload, then reads
    assert _open_multipart(store) == 0
    await other.close()


async def test_deleting_a_checkpointed_append_aborts_its_upload(store: S3Store):
    await store.put("uploads/d", b"")
    async with store.writer("uploads/d", append=True) as writer:
        await writer.write(os.urandom(6 << 20))
        await writer.commit()
    assert _open_multipart(store) == 1
    await store.delete("uploads/d")
    assert _open_multipart(store) == 0 and not await store.exists("uploads/d")


async def test_moving_a_checkpointed_append_moves_every_byte(store: S3Store):
    data = os.urandom(11 << 20)
    await store.put("uploads/m", b"")
    for piece in (data[: 6 << 20], data[6 << 20 :]):
        async with store.writer("uploads/m", append=True) as writer:
            await writer.write(piece)
            await writer.commit()
    await store.move("uploads/m", "blobs/m")
    assert await store.read("blobs/m") == data and _open_multipart(store) == 0


async def test_purging_staging_keeps_the_upload_of_a_checkpointed_session(store: S3Store):
    """Between two PATCHes a session's parts wait in an open upload: GC's purge (even with no
    grace) must not take it for a crashed writer's leftover."""
    data = os.urandom(6 << 20)
    await store.put("uploads/kept", b"")
    async with store.writer("uploads/kept", append=True) as writer:
        await writer.write(data)
        await writer.commit()
    assert await store.purge_staging(timedelta(0)) == 0
    async with store.writer("uploads/kept", append=True) as writer:
        await writer.write(b"more")
        await writer.commit()
    assert await store.read("uploads/kept") == data + b"more"
