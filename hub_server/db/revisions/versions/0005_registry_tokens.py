"""Registry tokens: the short-lived tokens ``/v2/token`` issues to OCI clients (``auth.registry_tokens``).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "registry_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["tokens.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("registry_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_registry_tokens_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("registry_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_registry_tokens_expires_at"))
    op.drop_table("registry_tokens")
