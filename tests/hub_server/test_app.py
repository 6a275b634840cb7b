"""The composition root: lifespan resources, /healthz, /metrics, OpenAPI, and the error envelope."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.settings import Settings
from hub_server.storage import StorageUnavailable
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error


def test_healthz_checks_database_and_store(hub: Hub):
    assert hub.client.get("/healthz").json() == {"status": "ok", "database": "ok", "storage": "ok"}
    hub.call(hub.registry.ctx.store.close)
    r = hub.client.get("/healthz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable" and body["database"] == "ok" and body["storage"].startswith("error")


def test_healthz_reports_a_full_store(make_hub, tmp_path):
    from dataclasses import replace as with_limits

    from hub_server.settings import Limits

    ok = make_hub(f"filesystem root={tmp_path / 'roomy'}")
    assert ok.client.get("/healthz").status_code == 200
    full = make_hub(f"filesystem root={tmp_path / 'full'}", limits=with_limits(Limits(), min_free_bytes=1 << 62))
    r = full.client.get("/healthz")  # no filesystem here has 4 EiB free
    assert r.status_code == 503
    assert r.json()["database"] == "ok"
    assert r.json()["storage"].startswith("error: full: ") and r.json()["storage"].endswith(
        f"bytes free, under the {1 << 62}-byte minimum"
    )


def test_metrics_exposes_http_storage_and_chunk_counters(hub: Hub, images, tmp_path):
    token = hub.token("admin", "admin")
    hub.pusher(token).push_chain("acme/vm", images[:1], tmp_path / "p", "v1")
    r = hub.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=")
    text = r.text
    assert 'forkd_hub_http_requests_total{method="PUT",route="/v2/{ns}/{repo}/manifests/{ref}",status="201"}' in text
    assert "forkd_hub_chunks_stored_total" in text and "forkd_hub_chunks_stored_total 0.0" not in text
    used = next(line for line in text.splitlines() if line.startswith("forkd_hub_storage_used_bytes "))
    assert float(used.split()[1]) > 0
    assert 'forkd_hub_repositories{visibility="public"} 0.0' in text
    assert 'visibility="private"' not in text  # anonymous: no count of private repositories
    admin = hub.client.get("/metrics", headers=auth(token)).text
    assert 'forkd_hub_repositories{visibility="private"} 1.0' in admin


def test_metrics_report_the_queues_an_operator_alerts_on(hub: Hub):
    """Open upload sessions and pending webhook deliveries, across replicas (counted in the database)."""
    token = hub.token("admin", "admin")

    def gauge(name: str) -> float:
        hub.call(hub.registry.refresh_gauges, 0)
        text = hub.client.get("/metrics", headers=auth(token)).text
        return float(next(line for line in text.splitlines() if line.startswith(f"{name} ")).split()[1])

    assert gauge("forkd_hub_upload_sessions") == 0 and gauge("forkd_hub_webhook_deliveries_pending") == 0
    for _ in range(2):
        assert hub.client.post("/v2/acme/vm/blobs/uploads/", headers=auth(token)).status_code == 202
    assert gauge("forkd_hub_upload_sessions") == 2


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/schema/openapi.json", "/schema/swagger", "/v2/"])
def test_system_routes_refuse_a_bad_token_like_every_route(hub: Hub, path: str):
    """Issue 16 item 7: the documented rule (a bad token is a 401 on every route) holds here too.
    (``/v2/`` also challenges anonymous callers, as OCI clients expect: issue 12.)"""
    assert hub.client.get(path).status_code == (401 if path == "/v2/" else 200)
    for header in ("Bearer fkd_not_a_token", "Basic Zm9vOmJhcg==x", "Bearer"):
        r = hub.client.get(path, headers={"Authorization": header})
        expect_error(r, 401, "UNAUTHORIZED")
    token = hub.token("reader", "pull:acme/*")
    assert hub.client.get(path, headers=auth(token)).status_code == 200


@pytest.mark.filterwarnings("error")
def test_openapi_document_generates(hub: Hub):
    r = hub.client.get("/schema/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    paths = doc["paths"]
    for path in [
        "/v2/{ns}/{repo}/manifests/{ref}",
        "/v2/{ns}/{repo}/blobs/uploads",
        "/v2/{ns}/{repo}/blobs/{digest}",
        "/api/v1/repositories/{ns}/{repo}/frames/query",
        "/api/v1/repositories/{ns}/{repo}/chain/{ref}",
        "/api/v1/repositories/{ns}/{repo}/lineage/{ref}",
        "/api/v1/namespaces",
        "/healthz",
        "/metrics",
    ]:
        assert path in paths, path
    chunk_query = paths["/api/v1/repositories/{ns}/{repo}/frames/query"]["post"]
    assert chunk_query["requestBody"]["required"] is True
    lineage = doc["components"]["schemas"]["LineageOut"]["properties"]
    assert {"logicalSize", "storedSize", "sharedWithParent"} <= set(lineage)
    assert hub.client.get("/schema/swagger").status_code == 200


def test_routing_and_validation_errors_use_the_envelope(hub: Hub):
    expect_error(hub.client.get("/no/such/route"), 404, "NOT_FOUND")
    r = hub.client.delete("/healthz")
    expect_error(r, 405, "METHOD_NOT_ALLOWED")
    assert "GET" in r.headers["Allow"]
    expect_error(hub.client.get("/api/v1/namespaces", params={"n": "many"}), 400, "INVALID_REQUEST")
    # under /v2/{ns}/{repo}/ the caller's access to the repository is settled first (registry/core/access.py)
    expect_error(hub.client.get("/v2/acme/vm/tags/list", params={"n": "many"}), 401, "UNAUTHORIZED")
    expect_error(hub.client.get("/v2/UPPER/vm/tags/list"), 400, "NAME_INVALID")


@pytest.mark.traceback_expected  # an unexpected error is logged with its traceback, never answered
def test_unexpected_errors_are_internal_without_details(hub: Hub, monkeypatch, caplog):
    async def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(hub.registry.catalog, "namespaces", boom)
    r = hub.client.get("/api/v1/namespaces")
    assert expect_error(r, 500, "INTERNAL") == {}
    assert "secret" not in r.text
    assert any("secret internals" in str(rec.exc_info[1]) for rec in caplog.records if rec.exc_info)


def test_lifespan_closes_the_store_and_the_engine(tmp_path):
    settings = Settings.for_data_dir(tmp_path / "data")
    app = create_app(settings)
    wal = tmp_path / "data" / "hub.db-wal"
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        store = app.state.store
        assert (tmp_path / "data" / "blobs").is_dir()
        assert wal.exists()  # pooled SQLite connections are open
    # SQLite removes the WAL file when the last connection closes: the engine was disposed
    assert not wal.exists()
    with pytest.raises(StorageUnavailable):
        asyncio.run(store.exists("blobs/x"))
