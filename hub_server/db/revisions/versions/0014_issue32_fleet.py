"""Fleet inventory: hosts, the layers they hold, and the report sequence (``db/models_fleet.py``, issue 32).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Only adds (tables, indexes, nullable columns): the previous release runs on it (db/schema.py).
expand = True

#: ``db.models.DIGEST_TYPE`` as of this revision (SQLite keeps 80, see revision 0006)
DIGEST = sa.String(length=144).with_variant(sa.String(length=80), "sqlite")


def upgrade() -> None:
    op.create_table(
        "fleet_hosts",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=False),
        sa.Column("partial", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_index("ix_fleet_hosts_seq", "fleet_hosts", ["seq"])
    op.create_index("ix_fleet_hosts_reported_at", "fleet_hosts", ["reported_at"])
    op.create_table(
        "fleet_host_layers",
        sa.Column("host", sa.String(length=64), nullable=False),
        sa.Column("layer_digest", DIGEST, nullable=False),
        sa.ForeignKeyConstraint(["host"], ["fleet_hosts.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("host", "layer_digest"),
    )
    sequence = op.create_table(
        "fleet_sequence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.Column("purges", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(sequence, [{"id": 1, "value": 0, "purges": 0}])


def downgrade() -> None:
    op.drop_table("fleet_sequence")
    op.drop_table("fleet_host_layers")
    op.drop_index("ix_fleet_hosts_reported_at", table_name="fleet_hosts")
    op.drop_index("ix_fleet_hosts_seq", table_name="fleet_hosts")
    op.drop_table("fleet_hosts")
