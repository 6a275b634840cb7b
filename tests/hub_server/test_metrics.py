"""HubMetrics and its middleware, through a tiny real Litestar app."""

from collections.abc import AsyncIterator

import pytest
from litestar import Litestar, Response, get, post
from litestar.exceptions import PermissionDeniedException
from litestar.params import FromPath, RawBody
from litestar.response import Stream
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from hub_server.metrics import UNMATCHED_ROUTE, HubMetrics, metrics_middleware

BLOB_ROUTE = "/v2/{ns}/{repo}/blobs/{digest}"


@get("/v2/{ns:str}/{repo:str}/blobs/{digest:str}")
async def get_blob(ns: FromPath[str], repo: FromPath[str], digest: FromPath[str]) -> bytes:
    return b"x" * 100


@post("/upload", status_code=201)
async def upload(body: RawBody) -> bytes:
    return b"ok"


@get("/stream")
async def stream() -> Stream:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"y" * 1000

    return Stream(chunks())


@get("/denied")
async def denied() -> None:
    raise PermissionDeniedException("no")


def make_app(metrics: HubMetrics) -> Litestar:
    @get("/metrics", sync_to_thread=False)
    def serve_metrics() -> Response[bytes]:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return Litestar([get_blob, upload, stream, denied, serve_metrics], middleware=[metrics_middleware(metrics)])


def sample(metrics: HubMetrics, name: str, **labels: str) -> float:
    body, _ = metrics.render()
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def test_render_exposes_every_metric():
    body, content_type = HubMetrics().render()
    assert content_type.startswith("text/plain")
    text = body.decode()
    for name in [
        "forkd_hub_http_requests_total",
        "forkd_hub_http_request_duration_seconds",
        "forkd_hub_bytes_in_total",
        "forkd_hub_bytes_out_total",
        "forkd_hub_chunks_deduplicated_total",
        "forkd_hub_chunks_stored_total",
        "forkd_hub_gc_runs_total",
        "forkd_hub_gc_deleted_bytes_total",
        "forkd_hub_storage_used_bytes",
        "forkd_hub_repositories",
    ]:
        assert f"# TYPE {name.removesuffix('_total')}" in text, name


def test_two_instances_do_not_collide():
    a, b = HubMetrics(), HubMetrics()
    a.record_chunks(stored=3, deduplicated=7)
    assert sample(a, "forkd_hub_chunks_stored_total") == 3
    assert sample(a, "forkd_hub_chunks_deduplicated_total") == 7
    assert sample(b, "forkd_hub_chunks_stored_total") == 0


def test_registry_helpers():
    m = HubMetrics()
    m.record_gc("ok", deleted_bytes=4096)
    m.record_gc("error")
    m.storage_used_bytes.set(10)
    m.repositories.labels(visibility="public").set(2)
    m.repositories.labels(visibility="private").set(3)
    assert sample(m, "forkd_hub_gc_runs_total", result="ok") == 1
    assert sample(m, "forkd_hub_gc_runs_total", result="error") == 1
    assert sample(m, "forkd_hub_gc_deleted_bytes_total") == 4096
    assert sample(m, "forkd_hub_storage_used_bytes") == 10
    assert sample(m, "forkd_hub_repositories", visibility="public") == 2
    assert sample(m, "forkd_hub_repositories", visibility="private") == 3
    public, _ = m.render(include_private=False)
    assert b'visibility="public"' in public and b'visibility="private"' not in public


def test_requests_are_counted_by_route_template():
    metrics = HubMetrics()
    with TestClient(make_app(metrics)) as client:
        assert client.get("/v2/acme/a/blobs/sha256:1").status_code == 200
        assert client.get("/v2/acme/b/blobs/sha256:2").status_code == 200
        assert client.get("/denied").status_code == 403
    assert sample(metrics, "forkd_hub_http_requests_total", route=BLOB_ROUTE, method="GET", status="200") == 2
    assert sample(metrics, "forkd_hub_http_requests_total", route="/denied", method="GET", status="403") == 1
    assert sample(metrics, "forkd_hub_http_request_duration_seconds_count", route=BLOB_ROUTE, method="GET") == 2
    body, _ = metrics.render()
    assert b"/v2/acme/a" not in body  # raw paths never become labels


def test_body_bytes_are_counted_both_ways():
    metrics = HubMetrics()
    with TestClient(make_app(metrics)) as client:
        assert client.post("/upload", content=b"z" * 5000).status_code == 201
        assert client.get("/stream").content == b"y" * 4000
        client.get("/v2/acme/a/blobs/sha256:1")
    assert sample(metrics, "forkd_hub_bytes_in_total") == 5000
    assert sample(metrics, "forkd_hub_bytes_out_total") == 2 + 4000 + 100


def test_metrics_endpoint_reports_earlier_requests():
    metrics = HubMetrics()
    with TestClient(make_app(metrics)) as client:
        client.get("/v2/acme/a/blobs/sha256:1")
        text = client.get("/metrics").text
        labels = f'method="GET",route="{BLOB_ROUTE}",status="200"'
        expected = "forkd_hub_http_requests_total{" + labels + "} 1.0"
        assert expected in text
        # The /metrics request itself is counted once it has finished.
        assert 'route="/metrics"' in client.get("/metrics").text


def test_wrapping_the_whole_app_also_counts_unmatched_requests():
    metrics = HubMetrics()
    app = metrics_middleware(metrics)(make_app(HubMetrics()))
    with TestClient(app) as client:
        assert client.get("/no/such/route").status_code == 404
        assert client.request("BREW", "/upload").status_code in (404, 405)
        client.get("/v2/acme/a/blobs/sha256:1")
    assert sample(metrics, "forkd_hub_http_requests_total", route=UNMATCHED_ROUTE, status="404") == 1
    assert sample(metrics, "forkd_hub_http_requests_total", route=UNMATCHED_ROUTE, method="OTHER") == 1
    assert sample(metrics, "forkd_hub_http_requests_total", route=BLOB_ROUTE, status="200") == 1


def test_failing_app_counts_as_500():
    metrics = HubMetrics()

    async def broken(scope, receive, send):
        raise RuntimeError("boom")

    app = metrics_middleware(metrics)(broken)
    client = TestClient(app)  # no lifespan: the broken app cannot start up
    with pytest.raises(RuntimeError, match="boom"):
        client.get("/x")
    assert sample(metrics, "forkd_hub_http_requests_total", route=UNMATCHED_ROUTE, status="500") == 1
