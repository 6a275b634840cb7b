"""The raw ASGI fast path for cached manifest GET/HEAD answers exactly as the route does.

Each request is sent twice: once with the repository's facts dropped from the read cache (the
Litestar route answers and fills the cache) and once more (the fast path answers:
``ManifestFastPath.served`` counts it). Status, headers (all but the per-request
``X-Request-ID``, in order), body, the access-log line's route/user/status and the metrics label
must be the same. Refusals (anonymous on a private repository, a bad or revoked token) are never
answered by the fast path.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import httpx
import pytest

from hub_server.api.fastpath import MANIFEST_ROUTE
from tests.hub_server.api.test_read_cache import OCI_MANIFEST, push_image
from tests.hub_server.pushing import auth, expect_error


def served(hub) -> int:
    return hub.client.app.state.manifest_fast_path.served


def comparable(r: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    return r.status_code, [(k, v) for k, v in r.headers.raw if k.lower() != b"x-request-id"], r.content


def by_route_then_fast(hub, method: str, path: str, headers: dict[str, str]) -> tuple[httpx.Response, httpx.Response]:
    """``method path`` answered by the route (cache facts dropped first), then by the fast path."""
    hub.registry.ctx.cache.forget_repository("acme", "vm")
    before = served(hub)
    routed = hub.client.request(method, path, headers=headers)
    assert served(hub) == before, "the first request must go to the route"
    fast = hub.client.request(method, path, headers=headers)
    assert served(hub) == before + 1, "the second request must be answered by the fast path"
    return routed, fast


@pytest.mark.parametrize("public", [True, False], ids=["anonymous-public", "token-private"])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("by", ["tag", "digest"])
def test_cached_answers_equal_the_routes(make_hub, caplog, public, method, by) -> None:
    hub = make_hub(cache_ttl=3600.0)
    admin = auth(hub.token("admin", "admin"))
    digest = push_image(hub.client, "acme/vm", "v1", 1, admin, public=public)
    headers = {} if public else auth(hub.token("reader", "pull:acme/*"))
    ref = "v1" if by == "tag" else digest
    with caplog.at_level(logging.INFO, logger="hub_server.access"):
        routed, fast = by_route_then_fast(hub, method, f"/v2/acme/vm/manifests/{ref}", headers)
    assert routed.status_code == 200
    assert routed.headers["Docker-Content-Digest"] == digest
    assert comparable(fast) == comparable(routed)
    lines = [r for r in caplog.records if r.name == "hub_server.access"][-2:]
    fields = [(r.route, r.user, r.status, r.method) for r in lines]  # type: ignore[attr-defined]
    assert fields[0] == fields[1] == (MANIFEST_ROUTE, None if public else "reader", 200, method)
    metrics = hub.client.get("/metrics", headers=admin).text
    series = f'forkd_hub_http_requests_total{{method="{method}",route="{MANIFEST_ROUTE}",status="200"}}'
    assert f"{series} 2.0" in metrics.splitlines(), "both answers are counted under the route's label"


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_text_media_type_gets_the_routes_charset(make_hub, method) -> None:
    """Litestar adds ``; charset=utf-8`` to a text/* content type; the fast path does the same."""
    hub = make_hub(cache_ttl=3600.0)
    admin = auth(hub.token("admin", "admin"))
    push_image(hub.client, "acme/vm", "v1", 1, admin, public=True)
    cached = hub.registry.ctx.cache
    hub.client.get("/v2/acme/vm/manifests/v1")
    digest = cached.repository("acme", "vm").tags["v1"]
    original = cached.manifest(digest)

    cached._manifests[digest] = replace(original, media_type="text/plain")  # noqa: SLF001 - no API replaces bytes
    routed, fast = by_route_then_fast(hub, method, "/v2/acme/vm/manifests/v1", {})
    assert routed.headers["content-type"] == "text/plain; charset=utf-8"
    assert comparable(fast) == comparable(routed)


def test_refusals_are_left_to_the_route(make_hub) -> None:
    hub = make_hub(cache_ttl=3600.0)
    admin = auth(hub.token("admin", "admin"))
    push_image(hub.client, "acme/vm", "v1", 1, admin)  # private
    reader = auth(hub.token("reader", "pull:acme/*"))
    other = auth(hub.token("other", "pull:elsewhere/*"))
    by_route_then_fast(hub, "GET", "/v2/acme/vm/manifests/v1", reader)  # facts and bytes cached
    before = served(hub)
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1"), 401, "UNAUTHORIZED")
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1", headers=auth("fkd_not-a-token")), 401, "UNAUTHORIZED")
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1", headers=other), 404, "NAME_UNKNOWN")
    expect_error(hub.client.get("/v2/acme/vm/manifests/v2", headers=reader), 404, "MANIFEST_UNKNOWN")
    assert served(hub) == before


def test_a_revoked_token_is_refused_once_the_ttl_has_passed(make_hub) -> None:
    """The fast path authenticates through the same token cache as the routes: a token revoked
    (as ``forkd-hub token revoke`` does) is refused at most ``cache_ttl`` later."""
    hub = make_hub(cache_ttl=0.5)
    admin = auth(hub.token("admin", "admin"))
    push_image(hub.client, "acme/vm", "v1", 1, admin)
    reader = auth(hub.token("reader", "pull:acme/*"))
    by_route_then_fast(hub, "GET", "/v2/acme/vm/manifests/v1", reader)
    hub.call(hub.client.app.state.tokens.revoke, "reader")
    deadline = time.monotonic() + 30  # generous: the TTL is 0.5 s; only "eventually" is asserted
    while (r := hub.client.get("/v2/acme/vm/manifests/v1", headers=reader)).status_code == 200:
        assert time.monotonic() < deadline, "a revoked token was still accepted long after the cache TTL"
        time.sleep(0.05)
    expect_error(r, 401, "UNAUTHORIZED")


def test_other_requests_go_to_the_route(make_hub) -> None:
    hub = make_hub(cache_ttl=3600.0)
    admin = auth(hub.token("admin", "admin"))
    push_image(hub.client, "acme/vm", "v1", 1, admin, public=True)
    by_route_then_fast(hub, "GET", "/v2/acme/vm/manifests/v1", {})
    before = served(hub)
    hub.client.get("/v2/acme/vm/manifests/v1?x=1")
    hub.client.get("/v2/acme/vm/manifests/v1/")
    hub.client.get("/v2/acme/vm/tags/list")
    hub.client.get("/v2/acme/vm/manifests/v1", headers={"Accept": OCI_MANIFEST, **auth("fkd_bad")})
    assert served(hub) == before
