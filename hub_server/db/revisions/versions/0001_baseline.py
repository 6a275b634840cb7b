"""Baseline: the schema the hand-written migration 1 (create_all) made, schema_versions included.

A database created before Alembic is stamped at this revision, then upgraded (hub_server/db/schema.py).

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("repository", sa.String(length=256), nullable=True),
        sa.Column("reference", sa.String(length=256), nullable=True),
        sa.Column("digest", sa.String(length=160), nullable=True),
        sa.Column("remote", sa.String(length=128), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_action"), ["action"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_actor"), ["actor"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_repository"), ["repository"], unique=False)

    op.create_table(
        "blobs",
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("media_type", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )
    with op.batch_alter_table("blobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_blobs_created_at"), ["created_at"], unique=False)

    op.create_table(
        "manifests",
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("media_type", sa.String(), nullable=False),
        sa.Column("artifact_type", sa.String(), nullable=True),
        sa.Column("config_digest", sa.String(length=80), nullable=True),
        sa.Column("parent_digest", sa.String(length=80), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("logical_size", sa.BigInteger(), nullable=False),
        sa.Column("stored_size", sa.BigInteger(), nullable=False),
        sa.Column("shared_with_parent", sa.BigInteger(), nullable=False),
        sa.Column("compat", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )
    with op.batch_alter_table("manifests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_manifests_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_manifests_parent_digest"), ["parent_digest"], unique=False)

    op.create_table(
        "repositories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("public", sa.Boolean(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "name", name="uq_repositories_name"),
    )
    with op.batch_alter_table("repositories", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_repositories_namespace"), ["namespace"], unique=False)

    op.create_table(
        "schema_versions",
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=8), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(
            "uq_tokens_active_name",
            ["name"],
            unique=True,
            sqlite_where=sa.text("revoked_at IS NULL"),
            postgresql_where=sa.text("revoked_at IS NULL"),
        )

    op.create_table(
        "chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("blob_digest", sa.String(length=80), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["blob_digest"], ["blobs.digest"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("blob_digest", "offset", "length", "digest", name="uq_chunks_location"),
    )
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chunks_blob_digest"), ["blob_digest"], unique=False)
        batch_op.create_index("ix_chunks_digest", ["digest"], unique=False)

    op.create_table(
        "manifest_blobs",
        sa.Column("manifest_digest", sa.String(length=80), nullable=False),
        sa.Column("blob_digest", sa.String(length=80), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["blob_digest"], ["blobs.digest"], ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["manifest_digest"], ["manifests.digest"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("manifest_digest", "blob_digest"),
    )
    with op.batch_alter_table("manifest_blobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_manifest_blobs_blob_digest"), ["blob_digest"], unique=False)

    op.create_table(
        "repository_blobs",
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("blob_digest", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["blob_digest"], ["blobs.digest"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("repository_id", "blob_digest"),
    )
    with op.batch_alter_table("repository_blobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_repository_blobs_blob_digest"), ["blob_digest"], unique=False)

    op.create_table(
        "repository_manifests",
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("manifest_digest", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["manifest_digest"], ["manifests.digest"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("repository_id", "manifest_digest"),
    )
    with op.batch_alter_table("repository_manifests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_repository_manifests_manifest_digest"), ["manifest_digest"], unique=False)

    op.create_table(
        "tags",
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("manifest_digest", sa.String(length=80), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["manifest_digest"], ["manifests.digest"], ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("repository_id", "name"),
    )
    with op.batch_alter_table("tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tags_manifest_digest"), ["manifest_digest"], unique=False)

    op.create_table(
        "uploads",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_uploads_updated_at"), ["updated_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_uploads_updated_at"))

    op.drop_table("uploads")
    with op.batch_alter_table("tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tags_manifest_digest"))

    op.drop_table("tags")
    with op.batch_alter_table("repository_manifests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_repository_manifests_manifest_digest"))

    op.drop_table("repository_manifests")
    with op.batch_alter_table("repository_blobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_repository_blobs_blob_digest"))

    op.drop_table("repository_blobs")
    with op.batch_alter_table("manifest_blobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_manifest_blobs_blob_digest"))

    op.drop_table("manifest_blobs")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_digest")
        batch_op.drop_index(batch_op.f("ix_chunks_blob_digest"))

    op.drop_table("chunks")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_tokens_active_name",
            sqlite_where=sa.text("revoked_at IS NULL"),
            postgresql_where=sa.text("revoked_at IS NULL"),
        )

    op.drop_table("tokens")
    op.drop_table("schema_versions")
    with op.batch_alter_table("repositories", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_repositories_namespace"))

    op.drop_table("repositories")
    with op.batch_alter_table("manifests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_manifests_parent_digest"))
        batch_op.drop_index(batch_op.f("ix_manifests_created_at"))

    op.drop_table("manifests")
    with op.batch_alter_table("blobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_blobs_created_at"))

    op.drop_table("blobs")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_repository"))
        batch_op.drop_index(batch_op.f("ix_audit_events_at"))
        batch_op.drop_index(batch_op.f("ix_audit_events_actor"))
        batch_op.drop_index(batch_op.f("ix_audit_events_action"))

    op.drop_table("audit_events")
