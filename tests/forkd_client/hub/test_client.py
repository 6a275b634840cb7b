"""HubClient against httpx.MockTransport: envelope → typed errors, ranges, digests.

The real hub is exercised end to end in tests/e2e; these pin the parsing edge cases.
"""

import httpx
import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import (
    DigestInvalid,
    Forbidden,
    HasDependents,
    HubError,
    HubUnreachable,
    NotAHub,
    NotFound,
    Unauthorized,
)
from forkd_client.hub.retry import Retrier
from manifest.digest import digest_bytes


def client_for(handler) -> HubClient:
    """A client of ``handler``; transient failures are not retried here (tests/forkd_client/hub/test_retry.py
    covers retries: with the default 60 s window, an unreachable hub would be retried for a minute)."""
    return HubClient(
        "http://hub", "tok", http=httpx.Client(transport=httpx.MockTransport(handler)), retrier=Retrier(window=0)
    )


def envelope(status, code, message="boom", detail=None):
    return httpx.Response(status, json={"errors": [{"code": code, "message": message, "detail": detail}]})


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (401, "UNAUTHORIZED", Unauthorized),
        (403, "DENIED", Forbidden),
        (404, "NAME_UNKNOWN", NotFound),
        (409, "HAS_DEPENDENTS", HasDependents),
        (400, "DIGEST_INVALID", DigestInvalid),
    ],
)
def test_errors_are_typed(status, code, cls):
    c = client_for(lambda request: envelope(status, code, detail={"dependents": [{"repository": "a/b", "tag": "t"}]}))
    with pytest.raises(cls) as info:
        c.repository("a/b").info()
    assert info.value.code == code and info.value.status == status
    if cls is HasDependents:
        assert info.value.dependents == [{"repository": "a/b", "tag": "t"}]


def test_bearer_token_is_sent():
    seen = {}

    def handler(request):
        seen["auth"] = request.headers.get("authorization")
        return httpx.Response(200, json={}, headers={"Docker-Distribution-Api-Version": "registry/2.0"})

    client_for(handler).ping()
    assert seen["auth"] == "Bearer tok"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (httpx.Response(404, text="<h1>Not Found</h1>"), "GET /v2/ answered HTTP 404"),
        (httpx.Response(200, text="<html>welcome</html>"), "answered without Docker-Distribution-Api-Version"),
    ],
)
def test_a_url_that_is_not_a_hub_is_named_as_such(answer, said):
    """Issue 30 item 8: any plain web server answered 'GET /v2/ failed with HTTP 404'."""
    with pytest.raises(NotAHub) as info:
        client_for(lambda request: answer).ping()
    assert said in str(info.value) and "is this a forkd hub?" in str(info.value)


def test_unreachable_hub():
    def handler(request):
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(HubUnreachable, match="unreachable"):
        client_for(handler).ping()


def test_blob_digest_is_verified():
    data = b"chunk map bytes"
    good = str(digest_bytes(data))
    c = client_for(lambda request: httpx.Response(200, content=data if good in str(request.url) else b"tampered"))
    assert c.repository("a/b").get_blob(good) == data
    bad = str(digest_bytes(b"other"))
    with pytest.raises(DigestInvalid, match="digest mismatch"):
        c.repository("a/b").get_blob(bad)


def test_multipart_byteranges_are_split_by_content_range():
    blob = bytes(range(256)) * 40

    def handler(request):
        specs = request.headers["range"].removeprefix("bytes=").split(",")
        body = b""
        for spec in specs:
            a, b = map(int, spec.split("-"))
            body += b"--XX\r\nContent-Type: application/octet-stream\r\n"
            body += f"Content-Range: bytes {a}-{b}/{len(blob)}\r\n\r\n".encode() + blob[a : b + 1] + b"\r\n"
        body += b"--XX--\r\n"
        return httpx.Response(206, content=body, headers={"content-type": "multipart/byteranges; boundary=XX"})

    ranges = [(0, 10), (100, 300), (5000, 1)]
    parts = client_for(handler).repository("a/b").read_ranges("blake3:" + "0" * 64, ranges)
    assert parts == [blob[o : o + n] for o, n in ranges]


def test_single_range_and_full_body_fallbacks():
    blob = b"0123456789" * 10

    def single(request):
        a, b = map(int, request.headers["range"].removeprefix("bytes=").split("-"))
        return httpx.Response(206, content=blob[a : b + 1], headers={"content-range": f"bytes {a}-{b}/{len(blob)}"})

    assert client_for(single).repository("a/b").read_ranges("blake3:" + "0" * 64, [(5, 7)]) == [blob[5:12]]
    full = client_for(lambda request: httpx.Response(200, content=blob))
    assert full.repository("a/b").read_ranges("blake3:" + "0" * 64, [(1, 2), (50, 3)]) == [blob[1:3], blob[50:53]]


def test_a_hub_cannot_make_the_client_buffer_more_than_a_request_needs():
    from forkd_client.hub.errors import HubError

    huge = b"x" * (2 << 20)
    c = client_for(lambda request: httpx.Response(200, content=huge))
    with pytest.raises(HubError, match="more than"):
        c.repository("a/b").get_blob(str(digest_bytes(b"small")), size=5)

    def streaming(request):  # no Content-Length: the limit still holds while reading
        return httpx.Response(200, content=iter([b"y" * 65536] * 64))

    with pytest.raises(HubError, match="more than"):
        client_for(streaming).repository("a/b").read_ranges("blake3:" + "0" * 64, [(0, 10)])


def test_a_blob_shorter_than_its_descriptor_is_refused():
    data = b"chunk map"
    c = client_for(lambda request: httpx.Response(200, content=data))
    with pytest.raises(DigestInvalid, match="descriptor says"):
        c.repository("a/b").get_blob(str(digest_bytes(data)), size=len(data) + 1)


def test_bad_tuning_variables_are_clear_errors(monkeypatch):
    from forkd_client.hub.errors import HubError
    from forkd_client.hub.fill import tunable as _tunable
    from forkd_client.hub.push import upload_part_bytes

    monkeypatch.setenv("FORKD_UPLOAD_PART_BYTES", "16MiB")
    with pytest.raises(HubError, match="FORKD_UPLOAD_PART_BYTES"):
        upload_part_bytes()
    monkeypatch.setenv("FORKD_PULL_PARALLEL", "many")
    with pytest.raises(HubError, match="FORKD_PULL_PARALLEL"):
        _tunable("FORKD_PULL_PARALLEL", 4, 1)


def test_the_token_stays_on_the_hub():
    """Redirects (presigned URLs) and a hub's 401 challenge never carry the token to another host:
    the client follows the redirect without it and never calls a challenge's realm."""
    data = b"blob bytes"
    digest = str(digest_bytes(data))
    seen = []

    def handler(request):
        seen.append((request.url.host, request.headers.get("authorization")))
        if request.url.host == "hub" and "/blobs/" in request.url.path:
            return httpx.Response(307, headers={"Location": "http://storage.example/presigned?sig=x"})
        if request.url.host == "storage.example":
            return httpx.Response(200, content=data)
        return httpx.Response(
            401,
            headers={"WWW-Authenticate": 'Bearer realm="http://evil.example/token",service="x"'},
            json={"errors": [{"code": "UNAUTHORIZED", "message": "m", "detail": {}}]},
        )

    c = client_for(handler)
    assert c.repository("a/b").get_blob(digest) == data
    with pytest.raises(Unauthorized):
        c.repository("a/b").info()
    assert seen[:2] == [("hub", "Bearer tok"), ("storage.example", None)]
    assert all(host == "hub" for host, _ in seen[2:])


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.repository("a/b").info(),
        lambda c: c.search("x"),
        lambda c: c.repository("a/b").lineage("v1"),
        lambda c: c.repository("a/b").get_chain("v1"),
        lambda c: c.repository("a/b").query_frames(["blake3:" + "0" * 64]),
    ],
    ids=["repository", "search", "lineage", "chain", "frames-query"],
)
def test_deeply_nested_answer_is_a_typed_error(call):
    """Issue 16 item 5: a hostile hub's deep JSON is a HubError naming it, not an internal error."""
    c = client_for(lambda request: httpx.Response(200, content=DEEP, headers={"Content-Type": "application/json"}))
    with pytest.raises(HubError, match="nested too deeply"):
        call(c)


def test_deeply_nested_error_envelope_keeps_the_status():
    c = client_for(lambda request: httpx.Response(404, content=DEEP, headers={"Content-Type": "application/json"}))
    with pytest.raises(NotFound, match="HTTP 404"):
        c.repository("a/b").info()


def test_a_blob_descriptor_over_our_limit_is_refused_without_a_request():
    """Issue 16 item 4: the descriptor's size comes from the hub; our own limit bounds the read."""
    requests = []

    def handler(request):
        requests.append(request)
        return httpx.Response(200, content=b"x" * 100)

    with pytest.raises(HubError, match="declares 1,099,511,627,776 bytes, over the 1,000 bytes"):
        client_for(handler).repository("a/b").get_blob("blake3:" + "0" * 64, 1 << 40, limit=1000)
    assert requests == []


def test_a_manifest_answer_is_bounded_by_the_manifest_limit():
    big = b"{" + b" " * (2 << 20) + b"}"
    with pytest.raises(HubError, match="more than the 1,048,576"):
        client_for(lambda request: httpx.Response(200, content=big)).repository("a/b").get_manifest("v1")


def test_a_request_read_in_pieces_asks_the_hub_once_and_slices_what_it_sent():
    blob = bytes(range(256)) * 4
    asked: list[str] = []

    def single(request):
        asked.append(request.headers["range"])
        a, b = map(int, request.headers["range"].removeprefix("bytes=").split("-"))
        return httpx.Response(206, content=blob[a : b + 1], headers={"content-range": f"bytes {a}-{b}/{len(blob)}"})

    read = client_for(single).repository("a/b").open_ranges("blake3:" + "0" * 64, [(100, 500)])
    assert read([(100, 10), (550, 50)]) == [blob[100:110], blob[550:600]]
    assert read([(300, 1)]) == [blob[300:301]]
    assert asked == ["bytes=100-599"]
    from forkd_client.hub.errors import HubError

    with pytest.raises(HubError, match="not asked for"):
        read([(590, 20)])  # past the range the hub answered


def test_an_upload_part_is_freed_when_its_request_returns():
    """httpx binds a streamed response and its stream to each other; the client breaks that cycle,
    so a sent part (the request's body) is freed at once, not by the cyclic GC: with the GC off,
    ten 4 MiB parts sent one after the other do not stay allocated."""
    import gc
    import os
    import tracemalloc

    client = client_for(lambda request: httpx.Response(202, headers={"Location": "/upload/1"}))
    part = 4 << 20
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(10):
            client.upload_chunk("/upload/1", os.urandom(part), i * part)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        gc.enable()
    assert grown < 2 * part, f"{grown:,} bytes still allocated after sending ten {part:,}-byte parts"
