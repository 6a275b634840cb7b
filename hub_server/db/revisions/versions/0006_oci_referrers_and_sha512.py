"""OCI content: the referrers index (``manifest_subjects``) and digest columns wide enough for sha512.

On PostgreSQL every digest column goes from VARCHAR(80) to VARCHAR(144) (``sha512:`` + 128 hex).
SQLite does not enforce VARCHAR lengths, so its columns stay as they are (widening them would
copy each table with foreign keys switched off, for nothing); the models say the same
(``db.models.DIGEST_TYPE``).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DIGEST_COLUMNS = {
    "blobs": ("digest",),
    "gc_marks": ("digest",),
    "chunks": ("digest", "blob_digest"),
    "manifest_blobs": ("manifest_digest", "blob_digest"),
    "manifests": ("digest", "config_digest", "parent_digest"),
    "repository_blobs": ("blob_digest",),
    "repository_manifests": ("manifest_digest",),
    "tags": ("manifest_digest",),
}


def _digest(length: int) -> sa.types.TypeEngine:
    return sa.String(length).with_variant(sa.String(80), "sqlite")


def upgrade() -> None:
    op.create_table(
        "manifest_subjects",
        sa.Column("manifest_digest", _digest(144), nullable=False),
        sa.Column("subject_digest", _digest(144), nullable=False),
        sa.ForeignKeyConstraint(["manifest_digest"], ["manifests.digest"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("manifest_digest"),
    )
    with op.batch_alter_table("manifest_subjects", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_manifest_subjects_subject_digest"), ["subject_digest"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in DIGEST_COLUMNS.items():
            for column in columns:
                op.alter_column(table, column, type_=sa.String(144), existing_type=sa.String(80))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in DIGEST_COLUMNS.items():
            for column in columns:
                op.alter_column(table, column, type_=sa.String(80), existing_type=sa.String(144))
    with op.batch_alter_table("manifest_subjects", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_manifest_subjects_subject_digest"))
    op.drop_table("manifest_subjects")
