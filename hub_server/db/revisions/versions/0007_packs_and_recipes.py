"""Format v2 (issue 9): data blobs stored as recipes over zstd frames kept once in pack objects.

``packs`` are immutable storage objects (``registry/paths.pack_key``); ``frames`` names each
stored frame by the blake3 of its bytes; ``recipe_frames`` lists a data blob's frames in order.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "packs",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    with op.batch_alter_table("packs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_packs_created_at"), ["created_at"], unique=False)

    op.create_table(
        "frames",
        sa.Column("digest", sa.String(length=144).with_variant(sa.String(length=80), "sqlite"), nullable=False),
        sa.Column("chunk_digest", sa.String(length=144).with_variant(sa.String(length=80), "sqlite"), nullable=False),
        sa.Column("raw_length", sa.Integer(), nullable=False),
        sa.Column("pack_key", sa.String(length=200), nullable=False),
        sa.Column("pack_offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["pack_key"], ["packs.key"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("digest"),
    )
    with op.batch_alter_table("frames", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_frames_chunk_digest"), ["chunk_digest"], unique=False)
        batch_op.create_index(batch_op.f("ix_frames_pack_key"), ["pack_key"], unique=False)

    op.create_table(
        "recipe_frames",
        sa.Column("blob_digest", sa.String(length=144).with_variant(sa.String(length=80), "sqlite"), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("frame_digest", sa.String(length=144).with_variant(sa.String(length=80), "sqlite"), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["blob_digest"], ["blobs.digest"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["frame_digest"], ["frames.digest"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("blob_digest", "offset"),
    )
    with op.batch_alter_table("recipe_frames", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_recipe_frames_frame_digest"), ["frame_digest"], unique=False)


def downgrade() -> None:
    op.drop_table("recipe_frames")
    op.drop_table("frames")
    op.drop_table("packs")
