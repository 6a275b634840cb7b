"""The database schema's version: Alembic revisions in ``hub_server/db/revisions/versions``.

``forkd-hub migrate`` calls :func:`upgrade`; every start (``serve``, ``gc``, ``token``, ``audit``,
through ``hub_server.compose.open_hub``) calls :func:`ensure_current`, which refuses a schema
older than this code, or upgrades it when migrating on start is allowed (the embedded SQLite default,
``Settings.migrate_on_start``).

A schema **newer** than this code is refused unless it was declared compatible with it: each revision
module says ``expand = True`` when the code of the revision before it still runs on it (it only adds:
tables, nullable columns or columns with defaults, indexes), and :func:`upgrade` records in ``schema_compat``
the oldest code revision that may run on the schema it made (:func:`oldest_code`: back over the expand
revisions). A replica of the previous release that restarts after ``forkd-hub migrate`` of an expand-only
release therefore starts (with a warning), which is what makes rolling upgrades work; a ``contract``
revision (drops, renames, new constraints) is refused by older code, and comes one release after the code
stopped using what it removes (docs/decisions/0005-schema-migrations.md).

A database made before Alembic (by the hand-written migration 1, recorded in a
``schema_versions`` table) holds exactly revision ``0001``'s tables: it is stamped ``0001``
and upgraded from there. On PostgreSQL an advisory lock serialises replicas migrating at once.
How to add a revision: docs/decisions/0005-schema-migrations.md.

Errors: :class:`SchemaMismatch` (a ``RuntimeError`` with a one-line message for operators);
SQLAlchemy and driver errors pass through (``open_hub`` reports them).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from hub_server.db.engine import import_models

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

# Alembic (and the revision modules, each importing it) is loaded only when a schema is not at this code's
# head: a start on an up-to-date database reads one row instead (:func:`_at_head`), which keeps ~60 ms of
# imports out of every ``forkd-hub serve`` (bench/hub_startup.py).

__all__ = [
    "BASELINE",
    "UNMODELLED_TABLES",
    "SchemaMismatch",
    "SchemaState",
    "ensure_current",
    "head_revision",
    "include_object",
    "oldest_code",
    "state",
    "upgrade",
]

log = logging.getLogger(__name__)

REVISIONS = Path(__file__).with_name("revisions")
#: The revision equal to what the pre-Alembic ``schema_versions`` migration 1 created.
BASELINE = "0001"
LEGACY_TABLE = "schema_versions"
#: pg_advisory_xact_lock key: "forkd-hub schema" (any constant shared by every replica).
_PG_LOCK = 0x666B6468_736368


#: Tables that revisions create without a SQLModel class (e.g. a SQLite FTS5 index and its
#: shadow tables ``<name>_data``, ``<name>_idx`` …): autogenerate and the model check skip them.
UNMODELLED_TABLES: frozenset[str] = frozenset(
    {
        "repository_search",  # revision 0008, db/search_index.py
        "schema_compat",  # revision 0012: written and read here only, by plain SQL
    }
)
#: The table naming the oldest code revision that runs on the schema (revision 0012).
COMPAT_TABLE = "schema_compat"


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic ``include_object`` hook: leave :data:`UNMODELLED_TABLES` (and their shadows) alone."""
    table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", None)
    return not any(table == t or (table or "").startswith(t + "_") for t in UNMODELLED_TABLES)


class SchemaMismatch(RuntimeError):
    """The database's schema is not the one this code was written for; the message says what to do."""


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands: ``current`` revision (None if empty or legacy) and this code's ``head``."""

    current: str | None
    head: str
    legacy: bool = False
    """Made by the pre-Alembic migrations (has ``schema_versions``, no ``alembic_version``)."""
    known: bool = True
    """``current`` is a revision this code has (False: a newer forkd-hub migrated it)."""
    oldest_code: str | None = None
    """The oldest code revision the schema's migration declared able to run on it (``schema_compat``)."""

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


@functools.cache
def _scripts() -> ScriptDirectory:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(REVISIONS))
    return ScriptDirectory.from_config(config)


def head_revision() -> str:
    """The newest revision this code knows. Raises CommandError if revisions branched (two heads)."""
    head = _scripts().get_current_head()
    assert head is not None, f"no revisions under {REVISIONS}"
    return head


#: ``revision: str = "0016"`` and ``down_revision: str | None = "0015"`` in a revision module (alembic's template)
_REVISION_LINE = re.compile(r'^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:"([^"]*)"|None)\s*$', re.MULTILINE)


@functools.cache
def head_from_files() -> str | None:
    """This code's head revision read from the revision modules' text, without Alembic: the one revision no
    other names as its ``down_revision``. None when that is not plain (a module it cannot read, a merge, two
    heads): the caller then asks Alembic. tests/hub_server/db/test_schema.py checks it against Alembic's."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for module in sorted((REVISIONS / "versions").glob("*.py")):
        if module.name == "__init__.py":
            continue
        found = dict(_REVISION_LINE.findall(module.read_text()))
        if "revision" not in found or "down_revision" not in found or not found["revision"]:
            return None
        revisions.add(found["revision"])
        if found["down_revision"]:
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


async def _at_head(engine: AsyncEngine) -> bool:
    """The database's ``alembic_version`` is exactly this code's head (one SELECT; False on any doubt: no such
    table, several rows, a head the files do not say plainly)."""
    head = head_from_files()
    if head is None:
        return False
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    except SQLAlchemyError:
        return False
    return [row[0] for row in rows] == [head]


def _state(conn: Connection) -> SchemaState:
    from alembic.runtime.migration import MigrationContext
    from alembic.util import CommandError

    head = head_revision()
    current = MigrationContext.configure(conn).get_current_revision()
    if current is None:
        legacy = inspect(conn).has_table(LEGACY_TABLE)
        return SchemaState(BASELINE if legacy else None, head, legacy=legacy)
    try:
        _scripts().get_revision(current)
    except CommandError:
        return SchemaState(current, head, known=False, oldest_code=_recorded_oldest_code(conn, current))
    return SchemaState(current, head)


def _recorded_oldest_code(conn: Connection, current: str) -> str | None:
    """What ``schema_compat`` says about the schema at ``current`` (None: nothing, or a row written for another
    revision: whatever moved the schema since did not declare it compatible)."""
    if not inspect(conn).has_table(COMPAT_TABLE):
        return None
    row = conn.execute(text(f"SELECT revision, oldest_code FROM {COMPAT_TABLE} WHERE id = 1")).first()
    return row[1] if row is not None and row[0] == current else None


def oldest_code(revision: str) -> str:
    """The oldest code revision that runs on a schema at ``revision``: back over the revisions that declare
    ``expand = True`` (the code before each runs on it), stopping at the first that does not."""
    scripts = _scripts()
    oldest = revision
    while True:
        module = scripts.get_revision(oldest)
        if module is None or not getattr(module.module, "expand", False) or module.down_revision is None:
            return oldest
        oldest = str(module.down_revision)


def _known(revision: str | None) -> bool:
    from alembic.util import CommandError

    if revision is None:
        return False
    try:
        return _scripts().get_revision(revision) is not None
    except CommandError:
        return False


def _record_compat(conn: Connection, head: str) -> None:
    """Write which code may run on the schema now at ``head`` (in the migration's transaction)."""
    if not inspect(conn).has_table(COMPAT_TABLE):
        return
    conn.execute(text(f"DELETE FROM {COMPAT_TABLE}"))
    conn.execute(
        text(f"INSERT INTO {COMPAT_TABLE} (id, revision, oldest_code) VALUES (1, :revision, :oldest)"),
        {"revision": head, "oldest": oldest_code(head)},
    )


async def state(engine: AsyncEngine) -> SchemaState:
    """Read the database's schema revision (no changes)."""
    async with engine.connect() as conn:
        return await conn.run_sync(_state)


def _pending(current: str | None, head: str) -> list[str]:
    revisions = _scripts().iterate_revisions(head, current)  # newest first
    return [r.revision for r in reversed(list(revisions))]


def _upgrade(conn: Connection) -> list[str]:
    from alembic.config import Config
    from alembic.runtime.environment import EnvironmentContext
    from sqlmodel import SQLModel

    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    now = _state(conn)
    if not now.known:
        raise SchemaMismatch(_newer_message(now))
    if now.up_to_date:
        return []
    import_models()
    scripts = _scripts()
    applied = _pending(now.current, now.head)

    def steps(heads, context):  # noqa: ANN001, ANN202 - alembic's callback signature
        return scripts._upgrade_revs(now.head, heads)  # noqa: SLF001 - what alembic's upgrade command calls

    with EnvironmentContext(Config(), scripts, fn=steps, destination_rev=now.head) as env:
        env.configure(connection=conn, target_metadata=SQLModel.metadata, render_as_batch=conn.dialect.name == "sqlite")
        if now.legacy:
            env.get_context().stamp(scripts, BASELINE)
        with env.begin_transaction():
            env.run_migrations()
    _record_compat(conn, now.head)
    return applied


async def upgrade(engine: AsyncEngine) -> list[str]:
    """Apply every revision newer than the database, in one transaction; return those applied.

    Raises: SchemaMismatch (the database is newer than this code), SQLAlchemy errors.
    """
    async with engine.begin() as conn:
        return await conn.run_sync(_upgrade)


async def ensure_current(engine: AsyncEngine, *, migrate: bool) -> list[str]:
    """Make sure the schema is this code's: upgrade it if ``migrate``, else refuse an older one.

    Returns the revisions applied. Raises: SchemaMismatch (newer than this code, or older and
    ``migrate`` is false), SQLAlchemy errors.
    """
    if await _at_head(engine):  # every start but the first after an upgrade: no Alembic
        return []
    now = await state(engine)
    if not now.known:
        if not _known(now.oldest_code):
            raise SchemaMismatch(_newer_message(now))
        log.warning(
            "the database schema is at revision %s, newer than this forkd-hub's %s; its migration declared code "
            "from revision %s on able to run on it (expand-only), so this one starts: replace it with the new release",
            now.current,
            now.head,
            now.oldest_code,
            extra={"schema": now.current, "code": now.head, "oldest_code": now.oldest_code},
        )
        return []
    if now.up_to_date:
        return []
    if not migrate:
        at = "empty" if now.current is None else f"at revision {now.current}"
        raise SchemaMismatch(
            f"the database schema is {at}, this forkd-hub needs revision {now.head}: run `forkd-hub migrate` first"
        )
    return await upgrade(engine)


def _newer_message(now: SchemaState) -> str:
    why = f"; it needs code from revision {now.oldest_code} on" if now.oldest_code is not None else ""
    return (
        f"the database schema is at revision {now.current}, newer than this forkd-hub knows "
        f"(its newest is {now.head}){why}: run the forkd-hub version that migrated it, or a later one"
    )
