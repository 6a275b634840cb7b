"""Fixtures for the catalog pages: an in-process hub with the seeded catalog (``seeding``), on
SQLite and on a fresh PostgreSQL database (the session's throwaway cluster).

On SQLite the catalog is seeded once per session (per worker) and each test's hub starts on a copy of that
hub's data directory (its database and filesystem store): seeding is ~100 requests, ~2 s of CPU a test.
On PostgreSQL each test seeds its own, as before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hub_server.conftest import Hub, hub_on_template, images, make_hub, stopped_hub_with  # noqa: F401
from tests.hub_server.pushing import chain_images
from tests.web.seeding import Catalog, seed_catalog


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest) -> Callable[[], str | None]:
    if request.param == "sqlite":
        return lambda: None
    return request.getfixturevalue("postgres").create_database


@pytest.fixture(scope="session")
def catalog_template(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> tuple[Path, Catalog]:
    """A stopped hub's data directory holding the seeded catalog, and the catalog (its admin token is in it)."""

    def fill(hub: Hub, work: Path) -> Catalog:
        (work / "images").mkdir()
        return seed_catalog(hub, chain_images(work / "images"), work / "seed")

    return stopped_hub_with(tmp_path_factory.mktemp("catalog-template"), sqlite_template, fill)


@pytest.fixture
def hub(make_hub: Callable[..., Hub], request: pytest.FixtureRequest) -> Hub:  # noqa: F811
    return hub_on_template(request, make_hub, "catalog", "catalog_template")


@pytest.fixture
def catalog(hub: Hub, images, tmp_path: Path, request: pytest.FixtureRequest) -> Catalog:  # noqa: F811
    if hub.template is not None:
        return request.getfixturevalue("catalog_template")[1]
    return seed_catalog(hub, images, tmp_path / "seed")
