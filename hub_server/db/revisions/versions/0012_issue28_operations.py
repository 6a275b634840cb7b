"""Operations: the audit hash chain kept in the database (deployment-wide), and which code may run on a schema.

``audit_events.seq``/``line_hash`` place every event in one chain for all replicas (``hub_server/audit.py``
seals events in commit order under the ``audit_chain`` head row); events recorded before this revision, or by
a replica still running the previous release, are sealed by the next event a current replica records.
``schema_compat`` (one row, written by ``forkd-hub migrate``) names the oldest code revision that may still run
on the schema, so a replica of the previous release restarts after an expand-only migration
(``hub_server/db/schema.py``; docs/operations.md, "Rolling upgrades").

Expand-only: nullable columns and new tables; the previous release runs on it unchanged.

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

#: The code of the revision before runs on this schema (docs/decisions/0005-schema-migrations.md).
expand = True

GENESIS = "0" * 64


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch_op:
        batch_op.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("line_hash", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_audit_events_seq", ["seq"], unique=True)
    chain = op.create_table(
        "audit_chain",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("line_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(chain, [{"id": 1, "seq": 0, "line_hash": GENESIS}])
    op.create_table(
        "schema_compat",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.String(length=32), nullable=False),
        sa.Column("oldest_code", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("schema_compat")
    op.drop_table("audit_chain")
    with op.batch_alter_table("audit_events") as batch_op:
        batch_op.drop_index("ix_audit_events_seq")
        batch_op.drop_column("line_hash")
        batch_op.drop_column("seq")
