"""Upload sessions remember the token that opened them (its opener may read or cancel it with pull).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Only adds (tables, indexes, nullable columns): the previous release runs on it (db/schema.py).
expand = True


def upgrade() -> None:
    with op.batch_alter_table("uploads") as batch:
        batch.add_column(sa.Column("opened_by", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("uploads") as batch:
        batch.drop_column("opened_by")
