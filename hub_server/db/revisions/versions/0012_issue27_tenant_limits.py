"""Tenant limits (issue 27): namespace quotas and usage, file proofs, ended web sessions.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DIGEST = sa.String(length=144).with_variant(sa.String(length=80), "sqlite")


def upgrade() -> None:
    op.create_table(
        "namespace_quotas",
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("storage_bytes", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace"),
    )
    op.create_table(
        "namespace_usage",
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
        sa.Column("counted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace"),
    )
    op.create_table(
        "file_proofs",
        sa.Column("digest", _DIGEST, nullable=False),
        sa.Column("sha256", sa.String(length=80), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("proven_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
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
    op.drop_table("file_proofs")
    op.drop_table("namespace_usage")
    op.drop_table("namespace_quotas")
