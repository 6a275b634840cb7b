"""Fixtures: real loopback receivers, and a hub whose webhooks may reach 127.0.0.1 with quick retries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.hub_server.conftest import Hub
from tests.hub_server.webhooks.receiver import Receiver

FAST = {"webhook_allow": "127.0.0.1/32", "webhook_backoff": 0.2, "webhook_poll": 0.1, "webhook_timeout": 3.0}


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest) -> Callable[[], str | None]:
    """The webhook suite runs on both databases (claims, leases and pruning are SQL)."""
    if request.param == "sqlite":
        return lambda: None
    return request.getfixturevalue("postgres").create_database


@pytest.fixture
def make_receiver() -> Iterator[Callable[..., Receiver]]:
    receivers: list[Receiver] = []

    def make(**kwargs: Any) -> Receiver:
        receivers.append(Receiver(**kwargs))
        return receivers[-1]

    yield make
    for r in receivers:
        r.close()


@pytest.fixture
def hooked_hub(make_hub: Callable[..., Hub]) -> Hub:
    return make_hub(**FAST)
