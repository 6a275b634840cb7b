"""A hub database at this code's schema head, migrated once and copied for each in-process hub on SQLite.

Every hub the unit tests start would otherwise run every Alembic revision on its empty ``hub.db`` (~0.25 s
of CPU a hub, and the unit tier starts several hundred): the copy starts it exactly where those migrations
end, as ``PostgresCluster.create_database`` copies its migrated template. The migrations themselves are
tested on empty databases of both kinds (tests/hub_server/db/test_schema.py).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

__all__ = ["make_template", "seed"]

DATABASE = "hub.db"


def make_template(directory: Path) -> Path:
    """Migrate a new ``hub.db`` in ``directory`` to the schema head; returns its path."""
    from hub_server.db.engine import make_engine
    from hub_server.db.schema import upgrade
    from hub_server.settings import sqlite_url

    async def migrate() -> None:
        engine = make_engine(sqlite_url(directory))
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()

    directory.mkdir(parents=True, exist_ok=True)
    asyncio.run(migrate())
    return directory / DATABASE


def seed(data_dir: Path, template: Path) -> None:
    """Give the hub of ``data_dir`` a copy of ``template`` as its database (it must not have one yet)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    target = data_dir / DATABASE
    if target.exists():
        raise FileExistsError(f"{target} exists already: a seeded hub starts from the template")
    shutil.copyfile(template, target)
