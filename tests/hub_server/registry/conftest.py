"""The registry suite runs on both databases: every hub a test makes gets SQLite or a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest) -> Callable[[], str | None]:
    if request.param == "sqlite":
        return lambda: None
    cluster = request.getfixturevalue("postgres")
    return cluster.create_database
