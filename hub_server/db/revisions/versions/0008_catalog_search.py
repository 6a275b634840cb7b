"""The web catalog: repositories count pulls; a full-text search index kept by triggers.

SQLite: ``repository_search`` is an FTS5 table, one row per repository (``rowid`` = its id) with
the columns namespace, name, description, tags (tag names) and annotations (annotation values
of the tagged manifests). PostgreSQL: ``repository_search (repository_id, document tsvector)``
with a GIN index. On both, triggers on ``repositories`` (name, description) and ``tags`` rebuild
a repository's row, so every writer keeps the index without knowing it; existing rows are
indexed here. The SQL is frozen in this file on purpose (a revision never imports code that
moves on). Read by ``hub_server.registry.read.search``; described in ``hub_server.db.search_index``.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_DOCUMENTS = """
INSERT INTO repository_search(rowid, namespace, name, description, tags, annotations)
SELECT r.id, r.namespace, r.name, r.description,
       coalesce((SELECT group_concat(t.name, ' ') FROM tags t WHERE t.repository_id = r.id), ''),
       coalesce((SELECT group_concat(j.value, ' ')
                 FROM tags t JOIN manifests m ON m.digest = t.manifest_digest, json_each(m.annotations) j
                 WHERE t.repository_id = r.id), '')
FROM repositories r
"""
_SQLITE_TRIGGERS = {
    "repository_search_repo_insert": ("AFTER INSERT ON repositories", "NEW.id"),
    "repository_search_repo_update": ("AFTER UPDATE OF namespace, name, description ON repositories", "NEW.id"),
    "repository_search_repo_delete": ("AFTER DELETE ON repositories", "OLD.id"),
    "repository_search_tag_insert": ("AFTER INSERT ON tags", "NEW.repository_id"),
    "repository_search_tag_update": ("AFTER UPDATE ON tags", "NEW.repository_id"),
    "repository_search_tag_delete": ("AFTER DELETE ON tags", "OLD.repository_id"),
}

_PG_REFRESH = """
CREATE FUNCTION repository_search_refresh(repo integer) RETURNS void LANGUAGE sql AS $$
  DELETE FROM repository_search WHERE repository_id = repo;
  INSERT INTO repository_search (repository_id, document)
  SELECT r.id, to_tsvector('simple', concat_ws(' ', r.namespace, r.name, r.description,
           (SELECT string_agg(t.name, ' ') FROM tags t WHERE t.repository_id = r.id),
           (SELECT string_agg(j.value, ' ')
            FROM tags t JOIN manifests m ON m.digest = t.manifest_digest
            CROSS JOIN LATERAL json_each_text(m.annotations) j
            WHERE t.repository_id = r.id)))
  FROM repositories r WHERE r.id = repo;
$$
"""
_PG_TRIGGER_FUNCTION = """
CREATE FUNCTION repository_search_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'repositories' THEN
    PERFORM repository_search_refresh(NEW.id);
  ELSE
    IF TG_OP IN ('UPDATE', 'DELETE') THEN PERFORM repository_search_refresh(OLD.repository_id); END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN PERFORM repository_search_refresh(NEW.repository_id); END IF;
  END IF;
  RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.add_column("repositories", sa.Column("pull_count", sa.BigInteger(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE repository_search USING fts5("
            "namespace, name, description, tags, annotations, tokenize = 'unicode61 remove_diacritics 2')"
        )
        for name, (when, repo) in _SQLITE_TRIGGERS.items():
            op.execute(
                f"CREATE TRIGGER {name} {when} BEGIN "
                f"DELETE FROM repository_search WHERE rowid = {repo}; "
                f"{_SQLITE_DOCUMENTS} WHERE r.id = {repo}; END"
            )
        op.execute(_SQLITE_DOCUMENTS)
        return
    op.execute(
        "CREATE TABLE repository_search (repository_id integer PRIMARY KEY "
        "REFERENCES repositories (id) ON DELETE CASCADE, document tsvector NOT NULL)"
    )
    op.execute("CREATE INDEX ix_repository_search_document ON repository_search USING GIN (document)")
    op.execute(_PG_REFRESH)
    op.execute(_PG_TRIGGER_FUNCTION)
    op.execute(
        "CREATE TRIGGER repository_search_repo AFTER INSERT OR UPDATE OF namespace, name, description "
        "ON repositories FOR EACH ROW EXECUTE FUNCTION repository_search_trigger()"
    )
    op.execute(
        "CREATE TRIGGER repository_search_tag AFTER INSERT OR UPDATE OR DELETE ON tags "
        "FOR EACH ROW EXECUTE FUNCTION repository_search_trigger()"
    )
    op.execute("SELECT repository_search_refresh(id) FROM repositories")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS repository_search")
    else:
        op.execute("DROP TRIGGER IF EXISTS repository_search_repo ON repositories")
        op.execute("DROP TRIGGER IF EXISTS repository_search_tag ON tags")
        op.execute("DROP TABLE IF EXISTS repository_search")
        op.execute("DROP FUNCTION IF EXISTS repository_search_trigger()")
        op.execute("DROP FUNCTION IF EXISTS repository_search_refresh(integer)")
    with op.batch_alter_table("repositories") as batch_op:
        batch_op.drop_column("pull_count")
