"""Schema revisions (Alembic): fresh databases, the pre-Alembic data dir, and refusing a foreign schema."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

from hub_server.cli import main
from hub_server.compose import HubStartError, open_hub
from hub_server.db.engine import import_models, make_engine
from hub_server.db.schema import (
    _scripts,
    head_from_files,
    head_revision,
    include_object,
    oldest_code,
    state,
    upgrade,
)
from hub_server.settings import Settings

LEGACY_SQL = Path(__file__).with_name("legacy_v1_hub.sql")
TABLES = {
    "repositories",
    "blobs",
    "repository_blobs",
    "manifests",
    "manifest_blobs",
    "repository_manifests",
    "tags",
    "chunks",
    "uploads",
    "tokens",
    "audit_events",
    "alembic_version",
}


def _tables(url: str) -> set[str]:
    async def go() -> set[str]:
        engine = make_engine(url)
        try:
            async with engine.connect() as conn:
                return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _settings(tmp_path: Path, **overrides) -> Settings:
    return replace(Settings.for_data_dir(tmp_path / "data"), storage="memory", **overrides)


def _legacy_data_dir(tmp_path: Path) -> Settings:
    settings = _settings(tmp_path)
    settings.data_dir.mkdir(parents=True)
    with sqlite3.connect(settings.data_dir / "hub.db") as db:
        db.executescript(LEGACY_SQL.read_text())
    return settings


def _set_revision(settings: Settings, revision: str) -> None:
    with sqlite3.connect(settings.data_dir / "hub.db") as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def test_revisions_form_one_line():
    # Two revisions with the same parent (two branches landing at once) must be merged first.
    assert len(_scripts().get_heads()) == 1
    assert head_revision() == _scripts().get_current_head()
    assert head_from_files() == head_revision()  # the start-up's fast check reads the same head


def test_the_fast_head_check_gives_up_on_anything_but_one_plain_head(tmp_path, monkeypatch):
    versions = tmp_path / "versions"
    versions.mkdir()
    write = lambda name, text: (versions / name).write_text(text)  # noqa: E731
    write("0001_a.py", 'revision: str = "0001"\ndown_revision: str | None = None\n')
    write("0002_b.py", 'revision: str = "0002"\ndown_revision: str | None = "0001"\n')
    monkeypatch.setattr("hub_server.db.schema.REVISIONS", tmp_path)
    head_from_files.cache_clear()
    try:
        assert head_from_files() == "0002"
        head_from_files.cache_clear()
        write("0003_c.py", 'revision: str = "0003"\ndown_revision: str | None = "0001"\n')  # a second head
        assert head_from_files() is None
        head_from_files.cache_clear()
        write("0003_c.py", 'revision = "0003"\ndown_revision = ("0001", "0002")\n')  # a merge: Alembic decides
        assert head_from_files() is None
    finally:
        head_from_files.cache_clear()


#: start a hub on an existing, up-to-date data dir in a fresh interpreter; print whether Alembic was imported
START_AND_REPORT = """
import asyncio, sys
from dataclasses import replace
from pathlib import Path
from hub_server.compose import open_hub
from hub_server.settings import Settings

async def go():
    async with open_hub(replace(Settings.for_data_dir(Path(sys.argv[1])), storage="memory")):
        pass

try:
    asyncio.run(go())
except Exception as e:  # a refused start still says what it imported
    print(type(e).__name__)
print("alembic" in sys.modules)
"""


@pytest.mark.integration  # a fresh interpreter: this one has imported Alembic already
def test_a_start_on_an_up_to_date_schema_does_not_load_alembic(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-c", START_AND_REPORT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout.split()[-1]
    assert run() == "True"  # the first start creates and migrates the database: Alembic
    assert run() == "False"  # the next ones read one row
    _set_revision(_settings(tmp_path), "9999")  # not this code's head: Alembic reads the schema (and refuses it)
    assert run() == "True"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hub.db'}"
    return request.getfixturevalue("postgres").create_database(empty=True)


def test_fresh_database_upgrades_to_head_once(empty_database):
    url = empty_database

    async def go() -> tuple[list[str], list[str], str | None]:
        engine = make_engine(url)
        try:
            first, again = await upgrade(engine), await upgrade(engine)
            return first, again, (await state(engine)).current
        finally:
            await engine.dispose()

    first, again, current = asyncio.run(go())
    assert first[0] == "0001" and first[-1] == head_revision()
    assert again == []
    assert current == head_revision()
    assert _tables(url) >= TABLES
    assert "schema_versions" not in _tables(url)


def test_revisions_build_exactly_the_models(empty_database):
    """A model changed without a revision (or a revision that differs from its model) fails here."""
    url = empty_database

    async def go() -> list:
        engine = make_engine(url)
        try:
            await upgrade(engine)
            import_models()
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda c: compare_metadata(
                        MigrationContext.configure(c, opts={"compare_type": True, "include_object": include_object}),
                        SQLModel.metadata,
                    )
                )
        finally:
            await engine.dispose()

    assert asyncio.run(go()) == []


def test_a_pre_alembic_data_dir_upgrades_with_its_data(tmp_path):
    settings = _legacy_data_dir(tmp_path)

    async def go():
        async with open_hub(settings) as hub:
            tokens = [t.name for t in await hub.tokens.list()]
            async with hub.sessions() as session:
                tag = (await session.exec(text("SELECT manifest_digest FROM tags WHERE name = 'head'"))).one()
                chunks = (await session.exec(text("SELECT count(*) FROM chunks"))).one()
            return hub.migrations_applied, tokens, tag[0], chunks[0]

    applied, tokens, tag_digest, chunks = asyncio.run(go())
    assert applied == list(_pending_after("0001"))
    assert tokens == ["admin"]
    assert tag_digest.startswith(("blake3:", "sha256:"))
    assert chunks == 15
    assert "schema_versions" not in _tables(settings.database_url)
    assert asyncio.run(_current(settings)) == head_revision()


def _pending_after(revision: str) -> list[str]:
    revisions = list(_scripts().iterate_revisions(head_revision(), revision))
    return [r.revision for r in reversed(revisions)]


async def _current(settings: Settings) -> str | None:
    engine = make_engine(settings.database_url)
    try:
        return (await state(engine)).current
    finally:
        await engine.dispose()


def test_migrate_command_upgrades_a_pre_alembic_data_dir(tmp_path, capsys):
    settings = _legacy_data_dir(tmp_path)
    assert main(["migrate", "--data-dir", str(settings.data_dir)]) == 0
    assert f"schema revision {head_revision()}: applied revision(s) {', '.join(_pending_after('0001'))}" in (
        capsys.readouterr().out
    )
    assert main(["migrate", "--data-dir", str(settings.data_dir)]) == 0
    assert "already up to date" in capsys.readouterr().out


def test_an_older_schema_is_refused_unless_migrating_on_start(tmp_path, capsys, monkeypatch):
    settings = _legacy_data_dir(tmp_path)

    async def go(s: Settings) -> list[str]:
        async with open_hub(s) as hub:
            return hub.migrations_applied

    with pytest.raises(
        HubStartError,
        match=r"schema is at revision 0001, this forkd-hub needs revision "
        rf"{head_revision()}: run `forkd-hub migrate` first",
    ):
        asyncio.run(go(replace(settings, migrate_on_start=False)))
    monkeypatch.setenv("FORKD_HUB_MIGRATE_ON_START", "false")
    assert main(["gc", "--data-dir", str(settings.data_dir)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run `forkd-hub migrate` first" in err and "Traceback" not in err
    assert asyncio.run(go(settings)) == _pending_after("0001")  # SQLite migrates on start by default


def test_a_newer_schema_is_refused_even_when_migrating(tmp_path, capsys):
    settings = _settings(tmp_path)
    assert main(["migrate", "--data-dir", str(settings.data_dir)]) == 0
    _set_revision(settings, "9999_from_the_future")
    for argv in (["serve", "--port", "0"], ["migrate"], ["token", "list"], ["audit"], ["gc"]):
        capsys.readouterr()
        assert main([*argv, "--data-dir", str(settings.data_dir)]) == 1, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)
        assert "schema is at revision 9999_from_the_future, newer than this forkd-hub knows" in err, (argv, err)


def _declare_compat(settings: Settings, revision: str, oldest_code: str) -> None:
    """What the next release's ``forkd-hub migrate`` writes: the schema at ``revision`` runs code from ``oldest_code``."""
    _set_revision(settings, revision)
    with sqlite3.connect(settings.data_dir / "hub.db") as db:
        db.execute("UPDATE schema_compat SET revision = ?, oldest_code = ?", (revision, oldest_code))


def test_migrate_records_the_oldest_code_that_runs_on_the_schema(tmp_path):
    settings = _settings(tmp_path)
    assert main(["migrate", "--data-dir", str(settings.data_dir)]) == 0
    with sqlite3.connect(settings.data_dir / "hub.db") as db:
        row = db.execute("SELECT revision, oldest_code FROM schema_compat").fetchall()
    assert row == [(head_revision(), oldest_code(head_revision()))]
    # the issue-28 revision only adds (expand = True): the release before it runs on its schema
    [ours] = [r for r in _scripts().walk_revisions() if "issue28" in Path(r.path).name]
    assert oldest_code(ours.revision) == oldest_code(str(ours.down_revision)) != ours.revision


def test_a_newer_schema_declared_compatible_starts_the_previous_release(tmp_path, capsys, caplog):
    """Issue 28 item 6: a replica of the previous release that restarts after an expand-only migration runs."""
    settings = _settings(tmp_path)
    assert main(["migrate", "--data-dir", str(settings.data_dir)]) == 0
    _declare_compat(settings, "9999_next_release", head_revision())
    capsys.readouterr()
    assert main(["token", "list", "--data-dir", str(settings.data_dir)]) == 0, capsys.readouterr().err
    assert "newer than this forkd-hub's" in caplog.text and "so this one starts" in caplog.text

    _declare_compat(settings, "9999_next_release", "9998_contracted")  # a contract revision: needs newer code
    for argv in (["token", "list"], ["gc"]):
        capsys.readouterr()
        assert main([*argv, "--data-dir", str(settings.data_dir)]) == 1, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)
        assert "schema is at revision 9999_next_release" in err and "needs code from revision 9998_contracted on" in err


def test_token_create_on_an_older_data_dir_runs_the_migrations(tmp_path, capsys):
    # A data dir that holds a hub upgrades on use (SQLite); one that holds none is refused
    # (issue 16 item 12: tests/hub_server/test_cli.py).
    settings = _legacy_data_dir(tmp_path)
    assert main(["token", "create", "ci", "--scope", "admin", "--data-dir", str(settings.data_dir)]) == 0
    assert asyncio.run(_current(settings)) == head_revision()
