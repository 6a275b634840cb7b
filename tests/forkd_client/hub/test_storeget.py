"""Presigned store ranges are read with http.client into one buffer per body (storeget.StoreReader):
byte-exact ranges from a real SeaweedFS, kept-alive connections, a store that closed an idle one,
and every bad answer a clear typed error."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import Forbidden, HubError, HubUnreachable
from forkd_client.hub.storeget import StoreReader, StoreRefusal
from tests.services.httpserver import QuietHTTPServer

OBJECT = os.urandom(3 << 20)


@pytest.fixture(scope="module")
def presigned(seaweedfs) -> str:
    client = seaweedfs.client()
    client.put_object(Bucket=seaweedfs.bucket, Key="storeget/object", Body=OBJECT)
    return client.generate_presigned_url(
        "get_object", Params={"Bucket": seaweedfs.bucket, "Key": "storeget/object"}, ExpiresIn=600
    )


@pytest.mark.slow
def test_ranges_from_a_real_store_are_exact_and_share_one_kept_alive_connection(presigned):
    reader = StoreReader(timeout=30)
    try:
        for start, end in [(0, 1), (5, 1 << 20), (1 << 20, 3 << 20), (len(OBJECT) - 7, len(OBJECT))]:
            body = reader.get_range(presigned, start, end)
            assert bytes(body) == OBJECT[start:end]
            assert isinstance(body.obj, bytearray)  # read into one buffer, not joined from parts
        assert reader.connections_made == 1
    finally:
        reader.close()


@pytest.mark.slow
def test_a_hub_client_reads_presigned_ranges_into_preallocated_buffers_and_counts_them(presigned):
    with HubClient("http://127.0.0.1:9") as client:
        body = client.store_range(presigned, 100, 2 << 20, "sha256:" + "0" * 64)
        assert bytes(body) == OBJECT[100 : 2 << 20]
        assert isinstance(body.obj, bytearray)  # httpx gave bytes joined from 64 KiB parts
        assert client.bytes_received == (2 << 20) - 100


@pytest.mark.slow
def test_a_refused_presigned_url_is_a_typed_error_without_its_signature(presigned):
    tampered = presigned.replace("Signature=", "Signature=00")  # SigV2 or SigV4, whichever boto3 made
    assert tampered != presigned
    reader = StoreReader(timeout=30)
    with pytest.raises(StoreRefusal) as refused:
        reader.get_range(tampered, 0, 10)
    assert refused.value.status == 403
    with HubClient("http://127.0.0.1:9") as client, pytest.raises(Forbidden) as e:
        client.store_range(tampered, 0, 10, "sha256:" + "0" * 64)
    assert "Signature" not in str(e.value)


def test_a_configured_proxy_keeps_store_ranges_on_httpx(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with HubClient("http://127.0.0.1:9") as client:
        assert client._store is not None
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    with HubClient("http://127.0.0.1:9") as client:
        assert client._store is None


# -- a store that misbehaves on purpose ---------------------------------------------------------

Answer = Callable[[BaseHTTPRequestHandler, int, int], None]


@pytest.fixture
def fake_store() -> Iterator[Callable[[Answer], str]]:
    servers = []

    def start(answer: Answer) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                first, last = self.headers["Range"].removeprefix("bytes=").split("-")
                answer(self, int(first), int(last) + 1)

            def log_message(self, *args: object) -> None:
                pass

        server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/bucket/key?X-Amz-Signature=secret"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _partial(handler: BaseHTTPRequestHandler, start: int, end: int, *, close: bool = False) -> None:
    handler.send_response(206)
    handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(OBJECT)}")
    handler.send_header("Content-Length", str(end - start))
    if close:
        handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(OBJECT[start:end])


def test_a_store_that_closed_an_idle_connection_is_asked_again_on_a_new_one(fake_store):
    def answer(handler: BaseHTTPRequestHandler, start: int, end: int) -> None:
        _partial(handler, start, end)
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)  # kept alive as far as the client knows, then gone
        handler.close_connection = True

    url = fake_store(answer)
    reader = StoreReader(timeout=10)
    assert bytes(reader.get_range(url, 0, 1000)) == OBJECT[:1000]
    assert bytes(reader.get_range(url, 1000, 5000)) == OBJECT[1000:5000]  # the stale one failed, a new one served
    assert reader.connections_made == 2


def test_a_store_ignoring_range_is_sliced_when_the_object_is_small(fake_store):
    small = OBJECT[:3000]

    def answer(handler: BaseHTTPRequestHandler, start: int, end: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(small)))
        handler.end_headers()
        handler.wfile.write(small)

    assert bytes(StoreReader(timeout=10).get_range(fake_store(answer), 100, 300)) == small[100:300]


def test_an_answer_larger_than_the_range_is_refused_before_it_is_read(fake_store):
    def answer(handler: BaseHTTPRequestHandler, start: int, end: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(OBJECT)))
        handler.end_headers()
        handler.wfile.write(OBJECT)

    url = fake_store(answer)
    with pytest.raises(HubError, match="more than the 5,096 this request can need") as e:
        StoreReader(timeout=10).get_range(url, 0, 1000)
    assert "secret" not in str(e.value)


def test_a_206_not_covering_the_range_is_refused(fake_store):
    url = fake_store(lambda handler, start, end: _partial(handler, start + 10, end + 10))
    with pytest.raises(HubError, match="does not cover bytes 0-999"):
        StoreReader(timeout=10).get_range(url, 0, 1000)


def test_a_body_cut_short_is_unreachable_not_a_traceback(fake_store):
    def answer(handler: BaseHTTPRequestHandler, start: int, end: int) -> None:
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(OBJECT)}")
        handler.send_header("Content-Length", str(end - start))
        handler.end_headers()
        handler.wfile.write(OBJECT[start : start + (end - start) // 2])
        handler.wfile.flush()
        handler.close_connection = True

    url = fake_store(answer)
    with HubClient("http://127.0.0.1:9") as client, pytest.raises(HubUnreachable, match="IncompleteRead") as e:
        client.store_range(url, 0, 100_000, "sha256:" + "0" * 64)
    assert "secret" not in str(e.value)


def test_a_store_that_is_down_is_unreachable(fake_store):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with HubClient("http://127.0.0.1:9") as client, pytest.raises(HubUnreachable, match="object store"):
        client.store_range(f"http://127.0.0.1:{port}/b/k?X-Amz-Signature=x", 0, 10, "sha256:" + "0" * 64)
