"""Schema migrations: applied once, recorded, idempotent."""

from __future__ import annotations

import asyncio

from sqlalchemy import inspect

from hub_server.db.engine import make_engine, sqlite_url
from hub_server.db.migrations import LATEST, current_version, upgrade


def test_upgrade_creates_every_table_once(tmp_path):
    async def go():
        engine = make_engine(sqlite_url(tmp_path))
        try:
            assert await current_version(engine) == 0
            assert await upgrade(engine) == list(range(1, LATEST + 1))
            assert await upgrade(engine) == []
            assert await current_version(engine) == LATEST
            async with engine.connect() as conn:
                return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        finally:
            await engine.dispose()

    tables = asyncio.run(go())
    assert {"repositories", "blobs", "repository_blobs", "manifests", "manifest_blobs", "repository_manifests",
            "tags", "chunks", "uploads", "schema_versions", "tokens", "audit_events"} <= tables
