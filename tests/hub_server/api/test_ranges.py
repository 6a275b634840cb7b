"""Range requests on blobs: parsing, single and multiple ranges (multipart/byteranges), limits."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace

import pytest

from hub_server.api.ranges import multipart_body, multipart_length, parse_range
from hub_server.errors import HubError
from hub_server.settings import Limits
from manifest.digest import digest_bytes
from tests.hub_server.pushing import expect_error, parse_byteranges


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-9", [(0, 9)]),
        ("bytes=5-", [(5, 99)]),
        ("bytes=-10", [(90, 99)]),
        ("bytes=-1000", [(0, 99)]),
        ("bytes=90-200", [(90, 99)]),
        ("bytes=0-0, 10-19 ,99-99", [(0, 0), (10, 19), (99, 99)]),
        ("bytes=100-200,0-1", [(0, 1)]),  # unsatisfiable parts are dropped when others remain
        ("BYTES=1-2", [(1, 2)]),
    ],
)
def test_parse_range(header, expected):
    assert parse_range(header, 100, 256) == expected


@pytest.mark.parametrize(
    "header", ["bytes=100-", "bytes=-0", "items=0-1", "bytes=", "bytes=5-1", "bytes=a-b", "bytes=1-2-3", "0-1"]
)
def test_unsatisfiable_or_malformed_ranges_are_416(header):
    with pytest.raises(HubError) as e:
        parse_range(header, 100, 256)
    assert e.value.code == "RANGE_INVALID" and e.value.status == 416
    assert e.value.headers == {"Content-Range": "bytes */100"}


def test_too_many_ranges():
    with pytest.raises(HubError) as e:
        parse_range("bytes=" + ",".join(f"{i}-{i}" for i in range(5)), 100, 4)
    assert e.value.code == "TOO_LARGE" and e.value.detail["limit"] == 4


def test_multipart_length_is_exact():
    data = bytes(range(256)) * 4

    async def read(offset, length):
        yield data[offset : offset + length]

    async def collect() -> bytes:
        return b"".join([p async for p in multipart_body("b0und", "application/octet-stream", ranges, len(data), read)])

    ranges = [(0, 9), (100, 100), (1000, 1023)]
    body = asyncio.run(collect())
    assert len(body) == multipart_length("b0und", "application/octet-stream", ranges, len(data))
    parts = parse_byteranges("multipart/byteranges; boundary=b0und", body)
    assert [(a, b, d) for a, b, d in parts] == [(a, b, data[a : b + 1]) for a, b in ranges]


@pytest.fixture
def blob(make_hub):
    hub = make_hub(limits=replace(Limits(), ranges_per_request=8))
    token = hub.token("admin", "admin")
    data = os.urandom(200_000)
    digest = str(digest_bytes(data))
    hub.client.post(
        "/v2/acme/vm/blobs/uploads/",
        params={"digest": digest},
        content=data,
        headers={"Authorization": f"Bearer {token}"},
    )
    hub.client.patch(
        "/api/v1/repositories/acme/vm", json={"public": True}, headers={"Authorization": f"Bearer {token}"}
    )
    return hub, data, f"/v2/acme/vm/blobs/{digest}", digest


def test_whole_blob_and_head(blob):
    hub, data, url, digest = blob
    r = hub.client.get(url)
    assert r.status_code == 200 and r.content == data
    assert r.headers["Docker-Content-Digest"] == digest and r.headers["Accept-Ranges"] == "bytes"
    head = hub.client.head(url)
    assert head.status_code == 200 and head.headers["Content-Length"] == str(len(data)) and head.content == b""


def test_single_range_is_206_with_content_range(blob):
    hub, data, url, _ = blob
    r = hub.client.get(url, headers={"Range": "bytes=1000-1999"})
    assert r.status_code == 206 and r.content == data[1000:2000]
    assert r.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    assert r.headers["Content-Length"] == "1000"


def test_several_ranges_are_multipart(blob):
    hub, data, url, _ = blob
    spans = [(0, 99), (150_000, 150_009), (199_990, 199_999)]
    r = hub.client.get(url, headers={"Range": "bytes=" + ",".join(f"{a}-{b}" for a, b in spans)})
    assert r.status_code == 206 and int(r.headers["Content-Length"]) == len(r.content)
    parts = parse_byteranges(r.headers["Content-Type"], r.content)
    assert parts == [(a, b, data[a : b + 1]) for a, b in spans]


def test_range_errors_through_the_app(blob):
    hub, data, url, _ = blob
    r = hub.client.get(url, headers={"Range": f"bytes={len(data)}-"})
    expect_error(r, 416, "RANGE_INVALID")
    assert r.headers["Content-Range"] == f"bytes */{len(data)}"
    too_many = "bytes=" + ",".join(f"{i}-{i}" for i in range(9))
    assert expect_error(hub.client.get(url, headers={"Range": too_many}), 413, "TOO_LARGE")["limit"] == 8
    expect_error(hub.client.get("/v2/acme/vm/blobs/blake3:" + "0" * 64), 404, "BLOB_UNKNOWN")
    expect_error(hub.client.get("/v2/acme/vm/blobs/md5:abc"), 400, "DIGEST_INVALID")
