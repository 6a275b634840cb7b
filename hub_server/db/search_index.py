"""The full-text search index over repositories (what the web catalog's search reads).

Created by revision ``0008_catalog_search`` (the DDL lives there, frozen) and kept current by
triggers on ``repositories`` (name, description) and ``tags``, so every writer (push, tag move,
delete, PATCH) keeps it without knowing it exists. Manifests are immutable, so their annotations
only change through tags.

- SQLite: ``repository_search`` is an FTS5 table, ``rowid`` = the repository's id, columns
  ``namespace``, ``name``, ``description``, ``tags`` (tag names), ``annotations`` (annotation
  values of the tagged manifests).
- PostgreSQL: ``repository_search (repository_id, document)``, the same text as a
  ``to_tsvector('simple', …)`` with a GIN index.

``hub_server.registry.read.search`` is the one reader.
"""

from __future__ import annotations

__all__ = ["FTS_TABLE", "has_fts5"]

FTS_TABLE = "repository_search"


def has_fts5(dialect_name: str) -> bool:
    """Whether this database's index is the SQLite FTS5 table (else the PostgreSQL tsvector table)."""
    return dialect_name == "sqlite"
