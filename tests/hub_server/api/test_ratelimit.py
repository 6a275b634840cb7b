"""Rate limits (docs/limits.md): token buckets per credential and per address, anonymous requests apart;
429 TOOMANYREQUESTS with Retry-After; on SQLite and PostgreSQL, with an injected clock (no wall-clock gates)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hub_server.api.ratelimit import Buckets, RateLimiter, client_key
from hub_server.settings import RateSpec
from tests.hub_server.pushing import auth, expect_error


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest) -> Callable[[], str | None]:
    if request.param == "sqlite":
        return lambda: None
    return request.getfixturevalue("postgres").create_database


def limited(make_hub, clock: Clock, **rates: RateSpec | None):
    hub = make_hub(**{"rate_token": None, "rate_address": None, "rate_anonymous": None, **rates})
    limiter: RateLimiter = hub.client.app.state.rate_limiter
    for buckets in (limiter.token, limiter.address, limiter.anonymous):
        if buckets is not None:
            buckets.clock = clock
    return hub, limiter


@pytest.mark.unit
def test_a_bucket_refills_at_its_rate_up_to_its_burst():
    clock = Clock()
    buckets = Buckets(RateSpec(2.0, 3), clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)
    assert buckets.take("b") == 0.0  # its own bucket
    clock.now += 0.5
    assert buckets.take("a") == 0.0 and buckets.take("a") > 0
    clock.now += 3600  # never more than the burst
    assert [buckets.take("a") for _ in range(4)][-1] > 0


@pytest.mark.unit
def test_the_bucket_table_is_bounded():
    buckets = Buckets(RateSpec(1.0, 1), Clock(), max_keys=100)
    for i in range(1000):
        buckets.take(f"10.0.{i // 256}.{i % 256}")
    assert len(buckets) == 100


@pytest.mark.unit
def test_an_ipv6_client_counts_as_its_64():
    assert client_key({"client": ("2001:db8:1:2:aaaa::1", 1)}) == client_key({"client": ("2001:db8:1:2:bbbb::9", 2)})
    assert client_key({"client": ("2001:db8:1:3::1", 1)}) != client_key({"client": ("2001:db8:1:2::1", 1)})
    assert client_key({"client": ("::ffff:127.0.0.1", 1)}) == "127.0.0.1"


def test_anonymous_requests_are_limited_apart_with_retry_after(make_hub):
    clock = Clock()
    hub, limiter = limited(make_hub, clock, rate_anonymous=RateSpec(0.5, 3), rate_token=RateSpec(100, 100))
    token = hub.token("ci", "pull:acme/*")
    for _ in range(3):
        assert hub.client.get("/v2/").status_code in (200, 401)
    r = hub.client.get("/v2/")
    detail = expect_error(r, 429, "TOOMANYREQUESTS")
    assert r.headers["Retry-After"] == "2" and detail == {"limit": "anonymous requests per address", "retryAfter": 2}
    # a client that signed in is not starved by anonymous traffic from the same address
    assert hub.client.get("/v2/", headers=auth(token)).status_code == 200
    assert hub.client.get("/healthz").status_code == 200  # never limited
    clock.now += 2
    assert hub.client.get("/v2/").status_code != 429
    assert limiter.refused == 1


def test_each_token_has_its_bucket_and_the_address_bounds_them_all(make_hub):
    clock = Clock()
    hub, _ = limited(make_hub, clock, rate_token=RateSpec(1, 2), rate_address=RateSpec(1, 5))
    a, b, c = (hub.token(n, "pull:acme/*") for n in "abc")
    assert [hub.client.get("/v2/", headers=auth(a)).status_code for _ in range(3)] == [200, 200, 429]
    assert [hub.client.get("/v2/", headers=auth(b)).status_code for _ in range(2)] == [200, 200]
    # five taken from the address (the refused one too): a third token is refused by the address
    detail = expect_error(hub.client.get("/v2/", headers=auth(c)), 429, "TOOMANYREQUESTS")
    assert detail["limit"] == "requests per address"
    # invented credentials are charged to the address as well, before any lookup
    assert hub.client.get("/v2/", headers=auth("fkd_invented")).status_code == 429
    clock.now += 1
    assert hub.client.get("/v2/", headers=auth(c)).status_code == 200


def test_off_means_unlimited(make_hub):
    hub, limiter = limited(make_hub, Clock())
    assert all(hub.client.get("/v2/").status_code != 429 for _ in range(50)) and limiter.refused == 0
