"""Repository policies: immutable tags and retention (``db/models_policy.py``).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "repository_policies",
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("immutable_tags", sa.Boolean(), nullable=True),
        sa.Column("immutable_exempt", sa.String(length=256), nullable=True),
        sa.Column("retention_keep_last", sa.Integer(), nullable=True),
        sa.Column("retention_keep_days", sa.Integer(), nullable=True),
        sa.Column("retention_pattern", sa.String(length=256), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("repository_id"),
    )


def downgrade() -> None:
    op.drop_table("repository_policies")
