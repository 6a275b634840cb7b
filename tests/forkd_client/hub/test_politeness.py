"""The client waits out a rate-limited hub (429 + Retry-After) against the real app: says so on stderr,
sleeps what the hub asks, gives up after MAX_RETRIES (clock and sleep injected: no wall-clock waits)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from litestar.testing import TestClient

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import HubError
from forkd_client.hub.politeness import MAX_RETRIES, MAX_WAIT, Patience, retry_after
from hub_server.app import create_app
from hub_server.settings import RateSpec, Settings
from tests.services.sqlite import seed


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limited(tmp_path: Path, sqlite_template: Path) -> Iterator[tuple[TestClient, Clock]]:
    settings = replace(Settings.for_data_dir(tmp_path / "hub"), storage="memory", rate_anonymous=RateSpec(0.25, 2))
    seed(tmp_path / "hub", sqlite_template)
    clock = Clock()
    with TestClient(create_app(settings), raise_server_exceptions=False) as http:
        http.app.state.rate_limiter.anonymous.clock = clock
        yield http, clock


def test_the_client_waits_as_the_hub_asks_and_says_so(limited):
    http, clock = limited
    slept: list[float] = []
    said: list[str] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    client = HubClient("http://testserver", http=http)
    client.patience = Patience(sleep=sleep, say=said.append)
    for _ in range(4):
        client.search()
    assert slept == [4.0, 4.0]  # one token every 4 s once the burst of 2 is spent
    assert len(said) == 2 and "429" in said[0] and "waiting 4 s" in said[0] and "GET /api/v1/repositories" in said[0]


def test_the_client_gives_up_after_a_bound(limited):
    http, _ = limited
    slept: list[float] = []
    client = HubClient("http://testserver", http=http)
    client.patience = Patience(sleep=slept.append, say=lambda line: None)  # time never passes
    client.search()
    client.search()
    with pytest.raises(HubError, match="too many requests"):
        client.search()
    assert len(slept) == MAX_RETRIES


def test_a_streamed_body_is_not_sent_twice(limited):
    http, _ = limited
    slept: list[float] = []
    client = HubClient("http://testserver", http=http)
    client.patience = Patience(sleep=slept.append, say=lambda line: None)
    client.search()
    client.search()
    with pytest.raises(HubError):
        client._request("POST", "/v2/acme/x/blobs/uploads/", content=iter([b"x"]), ok=(202,))
    assert slept == []


@pytest.mark.unit
def test_retry_after_is_read_defensively():
    assert retry_after("3") == 3.0
    assert retry_after(None) == retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == retry_after("nan") == 1.0
    assert retry_after("-5") == 1.0 and retry_after("0") == 0.0 and retry_after("99999") == MAX_WAIT
