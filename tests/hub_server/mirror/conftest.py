"""A mirror in front of a real upstream hub: the upstream is the hub's app served over HTTP on 127.0.0.1 in a
thread (tests/services/servedapp.py), the mirror the mirror's app in-process (Litestar ``TestClient``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.settings import Settings
from tests.hub_server.conftest import Hub, stopped_hub_with
from tests.hub_server.pushing import PushClient, chain_images
from tests.services.servedapp import ServedHub
from tests.services.sqlite import seed


@pytest.fixture(scope="session")
def pushed_template(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> tuple[Path, dict[str, Any]]:
    """A stopped hub's data directory holding a private ``acme/private:v1`` (a 3-link chain), a public
    ``acme/public:v1`` (its base layer: the same blobs) and a private ``other/own:v1`` (other content), pushed once
    per session; the admin token and the layers of ``acme/private``."""

    def fill(hub: Hub, work: Path) -> dict[str, Any]:
        token = hub.token("admin", "admin")
        (work / "images").mkdir()
        pusher = PushClient(hub.client, token)
        layers = pusher.push_chain("acme/private", chain_images(work / "images"), work / "push", "v1")
        pusher.push_layer("acme/public", layers[0], "v1", public=True, mount_from="acme/private")
        (work / "other").mkdir()
        pusher.push_chain("other/own", chain_images(work / "other", seed=99)[:1], work / "push-other", "v1")
        return {"token": token, "layers": layers}

    return stopped_hub_with(tmp_path_factory.mktemp("mirror-upstream"), sqlite_template, fill)


@pytest.fixture
def upstream(tmp_path: Path, sqlite_template: Path, request: pytest.FixtureRequest) -> Iterator[ServedHub]:
    """The upstream hub, served on 127.0.0.1: a copy of ``pushed_template`` when the test uses ``pushed``."""
    if "pushed" in request.fixturenames:
        shutil.copytree(request.getfixturevalue("pushed_template")[0], tmp_path / "up")
    else:
        seed(tmp_path / "up", sqlite_template)
    hub = ServedHub(Settings.for_data_dir(tmp_path / "up"))
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
def pushed(pushed_template: tuple[Path, dict[str, Any]], upstream: ServedHub) -> dict[str, Any]:
    """What ``upstream`` holds (see ``pushed_template``): the admin token and the pushed layers."""
    return pushed_template[1]
