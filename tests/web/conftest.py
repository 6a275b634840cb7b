"""Fixtures for the catalog pages: an in-process hub with the seeded catalog (``seeding``), on
SQLite and on a fresh PostgreSQL database (the session's throwaway cluster)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hub_server.conftest import Hub, hub, images, make_hub  # noqa: F401 - fixtures reused here
from tests.web.seeding import Catalog, seed_catalog


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest) -> Callable[[], str | None]:
    if request.param == "sqlite":
        return lambda: None
    return request.getfixturevalue("postgres").create_database


@pytest.fixture
def catalog(hub: Hub, images, tmp_path: Path) -> Catalog:  # noqa: F811
    return seed_catalog(hub, images, tmp_path / "seed")
