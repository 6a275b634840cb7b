"""Fixtures for the hub: the real app in-process (``TestClient``), tokens, and small snapshot images."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.registry.service import Registry
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient, chain_images
from tests.services.sqlite import seed

T = TypeVar("T")


class Hub:
    """A running in-process hub: an HTTP client plus handles on its registry, for assertions."""

    def __init__(self, client: TestClient[Any], settings: Settings, template: Path | None = None) -> None:
        self.client = client
        self.settings = settings
        self.template = template
        """The data directory this hub's was copied from (``make_hub(template=...)``), if any."""

    @property
    def registry(self) -> Registry:
        return self.client.app.state.registry

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run an async function in the app's event loop."""
        return self.client.blocking_portal.call(lambda: fn(*args, **kwargs))

    def token(self, name: str, *scopes: str, expires: timedelta | None = None) -> str:
        return self.call(self.client.app.state.tokens.create, name, list(scopes), expires)

    def pusher(self, token: str | None = None) -> PushClient:
        return PushClient(self.client, token)


def stopped_hub_with(root: Path, sqlite_template: Path, fill: Callable[[Hub, Path], T]) -> tuple[Path, T]:
    """The data directory (SQLite, filesystem store) of a hub stopped after ``fill(hub, workdir)`` ran on it, and
    what ``fill`` returned. A session fixture seeds such a template once; each test's hub then starts on a copy
    (``make_hub(template=...)``, :func:`hub_on_template`) instead of pushing the same content again."""
    data_dir = root / "hub"
    seed(data_dir, sqlite_template)
    settings = Settings.for_data_dir(data_dir)
    (root / "work").mkdir()
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        return data_dir, fill(Hub(client, settings), root / "work")


def hub_on_template(request: pytest.FixtureRequest, make_hub: Callable[..., Hub], wanted: str, template: str) -> Hub:
    """The test's hub: on a copy of the data directory of the session fixture ``template`` when the test uses the
    fixture ``wanted`` and runs on SQLite; else a new hub."""
    callspec = getattr(request.node, "callspec", None)
    on_sqlite = callspec is None or callspec.params.get("new_database", "sqlite") == "sqlite"
    if wanted in request.fixturenames and on_sqlite:
        return make_hub(template=request.getfixturevalue(template)[0])
    return make_hub()


@pytest.fixture
def new_database() -> Callable[[], str | None]:
    """A fresh database URL for each hub, or ``None`` for the embedded SQLite default.

    tests/hub_server/registry/conftest.py overrides it to run the registry suite on PostgreSQL too.
    """
    return lambda: None


@pytest.fixture
def make_hub(
    tmp_path: Path, new_database: Callable[[], str | None], sqlite_template: Path
) -> Iterator[Callable[..., Hub]]:
    clients: list[TestClient[Any]] = []

    def make(storage: str | None = None, *, template: Path | None = None, **overrides: Any) -> Hub:
        """A hub on a new data directory: SQLite (or the test's database) and the memory store; with
        ``template``, a copy of that data directory of a stopped hub on SQLite and its filesystem store."""
        data_dir = tmp_path / f"hub{len(clients)}"
        settings = Settings.for_data_dir(data_dir)
        if template is not None:
            shutil.copytree(template, data_dir)
            settings = replace(settings, **({"storage": storage} if storage else {}), **overrides)
        else:
            url = new_database()
            if url is not None:
                settings = replace(settings, database_url=url)
            elif "database_url" not in overrides:
                seed(data_dir, sqlite_template)  # at the schema head already (tests/services/sqlite.py)
            settings = replace(settings, storage=storage or "memory", **overrides)
        client = TestClient(create_app(settings), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return Hub(client, settings, template)

    yield make
    for client in reversed(clients):
        client.__exit__(None, None, None)


@pytest.fixture
def hub(make_hub: Callable[..., Hub]) -> Hub:
    return make_hub()


@pytest.fixture
def admin_token(hub: Hub) -> str:
    return hub.token("admin", "admin")


@pytest.fixture
def images(tmp_path: Path) -> list[tuple[Path, bytes]]:
    """A 3-link chain of small sparse memory images with vmstates (see ``pushing.chain_images``)."""
    return chain_images(tmp_path)
