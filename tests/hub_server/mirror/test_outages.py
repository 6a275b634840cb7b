"""The mirror when its upstream is down or lies: what is cached is still served (and a restarted mirror keeps
it), what is not is a clear 503 naming the upstream; bytes that do not match their digest are a 502 and are not
kept."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import HubError
from forkd_client.hub.retry import Retrier
from hub_server.app import create_app
from hub_server.mirror.cache import object_key
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient, auth, expect_error
from tests.services.httpserver import QuietHTTPServer


def test_cached_content_outlives_the_upstream_and_a_restart(upstream, make_mirror, pushed, tmp_path, caplog):
    token = pushed["token"]
    mirror = make_mirror(mirror_tag_ttl=0.0)  # every tag read asks the upstream again: stale once it is down
    expected = PushClient(mirror, token).pull("acme/private", "v1", tmp_path / "warm")
    assert mirror.get("/v2/acme/private/manifests/v1", headers=auth(token)).status_code == 200
    upstream.stop()
    r = mirror.get("/v2/acme/private/manifests/v1", headers=auth(token))
    assert r.status_code == 200 and r.headers["warning"] == '110 - "Response is Stale"'
    mirror.__exit__(None, None, None)

    restarted = make_mirror()  # same data directory, the upstream still down
    pulled = PushClient(restarted, token).pull("acme/private", "v1", tmp_path / "again")
    assert [p.read_bytes() for p, _ in pulled] == [p.read_bytes() for p, _ in expected]
    detail = expect_error(restarted.get("/v2/acme/private/manifests/v2", headers=auth(token)), 503, "UNAVAILABLE")
    assert detail["upstream"] == upstream.url
    message = restarted.get("/v2/acme/public/tags/list").json()["errors"][0]["message"]
    assert upstream.url in message and "cannot reach its upstream" in message
    # a credential the upstream never vouched for is refused, not let through because the upstream is down
    expect_error(restarted.get("/v2/acme/private/manifests/v1"), 503, "UNAVAILABLE")
    assert restarted.get("/healthz").json()["upstream"].startswith("unreachable")
    assert not [r for r in caplog.records if r.exc_info], "an outage of the upstream is no traceback"


class _Throttling(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(429)
        self.send_header("Retry-After", "7")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_upstream_rate_limiting_the_mirror_is_an_outage_not_a_refusal(tmp_path: Path) -> None:
    server = QuietHTTPServer(("127.0.0.1", 0), _Throttling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        settings = Settings.for_data_dir(tmp_path / "mirror", mirror_of=url)
        with TestClient(create_app(settings), raise_server_exceptions=False) as mirror:
            r = mirror.get("/v2/x/y/manifests/v1")
            expect_error(r, 503, "UNAVAILABLE")
            assert "429" in r.json()["errors"][0]["message"]
            index = mirror.app.state.mirror.index
            assert mirror.blocking_portal.call(index.answer, "anonymous", "x/y") is None  # nothing cached as a refusal
    finally:
        server.shutdown()
        server.server_close()


class _Liar(BaseHTTPRequestHandler):
    """An upstream that lets everyone read and serves the wrong bytes for every blob."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/v2/x/y/tags/list"):
            body = json.dumps({"name": "x/y", "tags": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = b"not what you asked for"
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def liar() -> Any:
    server = QuietHTTPServer(("127.0.0.1", 0), _Liar)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_bytes_that_do_not_match_their_digest_are_refused_and_not_kept(liar: str, tmp_path: Path) -> None:
    digest = "sha256:" + hashlib.sha256(b"the real bytes").hexdigest()
    settings = Settings.for_data_dir(tmp_path / "mirror", mirror_of=liar)
    with TestClient(create_app(settings), raise_server_exceptions=False) as mirror:
        detail = expect_error(mirror.get(f"/v2/x/y/blobs/{digest}"), 502, "DIGEST_INVALID")
        assert detail["digest"] == digest
        assert not (tmp_path / "mirror" / "blobs" / object_key(digest)).exists()
        assert not list((tmp_path / "mirror" / "blobs").rglob("*")) or all(
            p.is_dir() for p in (tmp_path / "mirror" / "blobs").rglob("*")
        )
        client = HubClient(str(mirror.base_url), http=mirror, retrier=Retrier(window=0))  # a 502 is not retried
        with pytest.raises(HubError, match="hash to"):
            client.repository("x/y").get_blob(digest)
        assert mirror.get("/metrics").text.count("forkd_mirror_cache_bytes 0.0") == 1


def test_an_evicted_object_is_fetched_again(upstream, make_mirror, pushed):
    token = pushed["token"]
    blob = pushed["layers"][0].chunk_map.blobs[0]
    manifest = pushed["layers"][1].digest
    mirror = make_mirror(mirror_cache_bytes=1)  # every new object evicts the others
    state = mirror.app.state.mirror
    state.cache.in_use = 0.0  # nothing is still being answered between these requests
    first = mirror.get(f"/v2/acme/private/blobs/{blob}", headers=auth(token))
    assert mirror.get(f"/v2/acme/private/manifests/{manifest}", headers=auth(token)).status_code == 200
    assert state.metrics.value("forkd_mirror_evictions_total") >= 1
    again = mirror.get(f"/v2/acme/private/blobs/{blob}", headers=auth(token))
    assert again.content == first.content
    assert state.metrics.value("forkd_mirror_upstream_fetches_total", kind="blob") == 2
