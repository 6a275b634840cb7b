"""A mirror in front of a real upstream hub: the upstream is the hub's app served over HTTP on 127.0.0.1 in a
thread (tests/services/servedapp.py), the mirror the mirror's app in-process (Litestar ``TestClient``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient, chain_images
from tests.services.servedapp import ServedHub
from tests.services.sqlite import seed


@pytest.fixture
def upstream(tmp_path: Path, sqlite_template: Path) -> Iterator[ServedHub]:
    settings = replace(Settings.for_data_dir(tmp_path / "up"), storage=f"filesystem root={tmp_path / 'up' / 'blobs'}")
    seed(tmp_path / "up", sqlite_template)
    hub = ServedHub(settings)
    yield hub
    hub.stop()


@pytest.fixture
def make_mirror(tmp_path: Path, upstream: ServedHub) -> Iterator[Callable[..., TestClient[Any]]]:
    """``make_mirror(**settings)``: a mirror of ``upstream`` on ``tmp_path/mirror`` (the same directory each time,
    so a second one is the first one restarted); each is closed at the end (or by the test)."""
    clients: list[TestClient[Any]] = []

    def make(**overrides: Any) -> TestClient[Any]:
        settings = Settings.for_data_dir(tmp_path / "mirror", mirror_of=upstream.url, **overrides)
        client = TestClient(create_app(settings), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in reversed(clients):
        client.__exit__(None, None, None)


@pytest.fixture
def pushed(upstream: ServedHub, tmp_path: Path) -> dict[str, Any]:
    """On the upstream: a private ``acme/private:v1`` (a 3-link chain) and a public ``acme/public:v1`` holding its
    base layer (the same blobs); the admin token that pushed them."""
    token = upstream.token("admin", "admin")
    (tmp_path / "images").mkdir()
    images = chain_images(tmp_path / "images")
    with httpx.Client(base_url=upstream.url, timeout=60) as http:
        pusher = PushClient(http, token)
        layers = pusher.push_chain("acme/private", images, tmp_path / "work", "v1")
        pusher.push_layer("acme/public", layers[0], "v1", public=True, mount_from="acme/private")
    return {"token": token, "layers": layers}
