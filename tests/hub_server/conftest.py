"""Fixtures for the hub: the real app in-process (``TestClient``), tokens, and small snapshot images."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.registry.service import Registry
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient, chain_images
from tests.services.sqlite import seed


class Hub:
    """A running in-process hub: an HTTP client plus handles on its registry, for assertions."""

    def __init__(self, client: TestClient[Any], settings: Settings) -> None:
        self.client = client
        self.settings = settings

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

    def make(storage: str | None = None, **overrides: Any) -> Hub:
        data_dir = tmp_path / f"hub{len(clients)}"
        settings = Settings.for_data_dir(data_dir)
        url = new_database()
        if url is not None:
            settings = replace(settings, database_url=url)
        elif "database_url" not in overrides:
            seed(data_dir, sqlite_template)  # at the schema head already (tests/services/sqlite.py)
        settings = replace(settings, storage=storage or "memory", **overrides)
        client = TestClient(create_app(settings), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return Hub(client, settings)

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
