"""Tenant limits (issue 27): namespace storage quotas, ended web sessions.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Only adds (tables, indexes, nullable columns): the previous release runs on it (db/schema.py).
expand = True


def upgrade() -> None:
    op.create_table(
        "namespace_quotas",
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("storage_bytes", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace"),
    )
    op.create_table(
        "web_session_ends",
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.create_index("ix_web_session_ends_ends_at", "web_session_ends", ["ends_at"])


def downgrade() -> None:
    op.drop_index("ix_web_session_ends_ends_at", table_name="web_session_ends")
    op.drop_table("web_session_ends")
    op.drop_table("namespace_quotas")
