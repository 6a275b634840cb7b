"""Upload recipes: a data blob's recipe declared up front, verified as its frames stream in.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upload_recipes",
        sa.Column("upload_id", sa.String(length=36), nullable=False),
        sa.Column("recipe", sa.LargeBinary(), nullable=False),
        sa.Column("next_frame", sa.BigInteger(), nullable=False),
        sa.Column("consumed", sa.BigInteger(), nullable=False),
        sa.Column("carry", sa.LargeBinary(), nullable=False),
        sa.Column("sha256_state", sa.LargeBinary(), nullable=False),
        sa.Column("hashed", sa.BigInteger(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["upload_id"], ["uploads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("upload_id"),
    )


def downgrade() -> None:
    op.drop_table("upload_recipes")
