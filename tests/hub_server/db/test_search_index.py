"""The search index of revision 0005: built over the rows already there, then kept by triggers,
on SQLite (FTS5) and PostgreSQL (tsvector)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hub_server.db.engine import make_engine, sqlite_url
from hub_server.db.schema import REVISIONS, head_revision, upgrade

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return request.getfixturevalue("postgres").create_database(empty=True)


async def _matches(conn: AsyncConnection, word: str) -> list[int]:
    if conn.dialect.name == "sqlite":
        query = "SELECT rowid FROM repository_search WHERE repository_search MATCH :q ORDER BY rowid"
        params = {"q": f'"{word}"'}
    else:
        query = (
            "SELECT repository_id FROM repository_search WHERE document @@ to_tsquery('simple', :q) "
            "ORDER BY repository_id"
        )
        params = {"q": word}
    return [r[0] for r in await conn.execute(text(query), params)]


def _upgrade_to(revision: str) -> Callable:
    def go(sync_conn) -> None:  # noqa: ANN001
        config = Config()
        config.set_main_option("script_location", str(REVISIONS))
        config.attributes["connection"] = sync_conn
        command.upgrade(config, revision)

    return go


def test_revision_indexes_old_rows_and_triggers_keep_the_index(database_url: str) -> None:
    async def go() -> None:
        engine = make_engine(database_url)
        try:
            async with engine.begin() as conn:  # a hub as it was before the catalog: revision 0007, with data
                await conn.run_sync(_upgrade_to("0007"))
                await conn.execute(
                    text(
                        "INSERT INTO repositories (id, namespace, name, public, description, created_at, updated_at) "
                        "VALUES (1, 'acme', 'py-base', :yes, 'A tiny Python guest', :t, :t)"
                    ),
                    {"t": NOW, "yes": True},
                )
                await conn.execute(
                    text(
                        "INSERT INTO manifests (digest, size, media_type, created_at, logical_size, stored_size, "
                        "shared_with_parent, compat, annotations) VALUES ('blake3:aa', 1, 'm', :t, 0, 0, 0, '{}', :a)"
                    ),
                    {"t": NOW, "a": json.dumps({"org.example.recipe": "numpy wheels"})},
                )
                await conn.execute(
                    text(
                        "INSERT INTO tags (repository_id, name, manifest_digest, updated_at) "
                        "VALUES (1, 'stable', 'blake3:aa', :t)"
                    ),
                    {"t": NOW},
                )
            applied = await upgrade(
                engine
            )  # 0008, then any later revision (0009 repository policies, 0010 damage marks, ...)
            assert applied[0] == "0008" and applied[-1] == head_revision() and len(applied) == len(set(applied))
            async with engine.begin() as conn:
                assert (await conn.execute(text("SELECT pull_count FROM repositories"))).scalar_one() == 0
                assert await _matches(conn, "tiny") == [1]
                assert await _matches(conn, "wheels") == [1]  # annotation values of tagged manifests
                assert await _matches(conn, "stable") == [1]  # tag names
                await conn.execute(text("UPDATE repositories SET description = 'renamed' WHERE id = 1"))
                assert await _matches(conn, "tiny") == [] and await _matches(conn, "renamed") == [1]
                await conn.execute(text("UPDATE repositories SET pull_count = pull_count + 1"))
                assert await _matches(conn, "renamed") == [1]
                await conn.execute(text("UPDATE tags SET name = 'edge'"))
                assert await _matches(conn, "stable") == [] and await _matches(conn, "edge") == [1]
                await conn.execute(text("DELETE FROM tags"))
                assert await _matches(conn, "wheels") == [] and await _matches(conn, "renamed") == [1]
                await conn.execute(
                    text(
                        "INSERT INTO repositories (id, namespace, name, public, description, "
                        "created_at, updated_at) VALUES (2, 'beta', 'tools', :no, 'zebra', :t, :t)"
                    ),
                    {"t": NOW, "no": False},
                )
                assert await _matches(conn, "zebra") == [2]
                await conn.execute(text("DELETE FROM repositories WHERE id = 2"))
                assert await _matches(conn, "zebra") == []
        finally:
            await engine.dispose()

    asyncio.run(go())
