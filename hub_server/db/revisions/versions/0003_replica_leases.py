"""Replicas: upload session leases, the GC lease, and when GC first saw an object unreferenced.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gc_leases",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "gc_marks",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("unreferenced_since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "digest"),
    )
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.drop_column("lease_until")
        batch_op.drop_column("lease_owner")

    op.drop_table("gc_marks")
    op.drop_table("gc_leases")
