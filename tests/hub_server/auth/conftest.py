"""Fixtures for the auth tests: a real SQLite database in a temp dir, on asyncio via anyio."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from hub_server.db.engine import create_schema, make_engine, make_session_factory, sqlite_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
async def sessions(data_dir: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(sqlite_url(data_dir))
    await create_schema(engine)
    yield make_session_factory(engine)
    await engine.dispose()
