"""The registry's tables (SQLModel). Wire schemas live apart, in ``hub_server/api/schemas.py``.

::

    repositories      (id, namespace, name, public, description, created_at, updated_at, pull_count)
    blobs             (digest PK, size, media_type, created_at)      every stored object, manifests too
    repository_blobs  (repository_id, blob_digest)                   a blob is readable through these
    manifests         (digest PK, size, media_type, artifact_type, config_digest, parent_digest,
                       created_at, logical_size, stored_size, shared_with_parent, compat, annotations)
    manifest_blobs    (manifest_digest, blob_digest, role)           what a manifest references
    manifest_subjects (manifest_digest PK, subject_digest)           an OCI manifest's subject (referrers API)
    repository_manifests (repository_id, manifest_digest)
    tags              (repository_id, name, manifest_digest, updated_at)
    chunks            (id, digest, blob_digest, offset, length)      verified chunk frame locations
    packs             (key PK, size, created_at)                     pack objects: frames stored once
    frames            (digest PK, chunk_digest, raw_length, pack_key, pack_offset, length)
                                                                     a stored zstd frame, by the blake3 of its bytes
    recipe_frames     (blob_digest, offset, frame_digest, length)    a data blob stored as frames, in order
    uploads           (id, repository_id, size, created_at, updated_at, lease_owner, lease_until, opened_by)
                                                                     opened_by: the token that opened it (revision 0013)
    upload_recipes    (upload_id PK, recipe, next_frame, consumed, carry, sha256_state, hashed, valid)
                                                                     a recipe declared before its frames, verified
                                                                     as PATCHes stream in (revision 0011)
    gc_leases         (name, holder, expires_at)                     one GC sweeps at a time (replicas)
    gc_marks          (kind, digest, unreferenced_since)             when GC first saw an object unreferenced
    damage            (key PK, kind, reason, found_at, moved_to)     stored content found damaged: a forkd
                                                                     pack that cannot be built, an object
                                                                     ``forkd-hub verify`` failed (revision 0010)
    alembic_version   (version_num)                                  the schema revision (db/schema.py)
    repository_search (SQLite: an FTS5 table, one row per repository, kept by triggers; revision
                       0008, see ``db.search_index``)

Blob rows exist only for objects that were verified and moved to their content address.
Digests are ``algorithm:hex`` strings. Timestamps are timezone-aware UTC on every backend.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Column, ForeignKey, Index, LargeBinary, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

# One timestamp type for every table (aware UTC in Python on SQLite and PostgreSQL alike).
from hub_server.db.types import UTCDateTime, utcnow

__all__ = [
    "Blob",
    "BlobRole",
    "Chunk",
    "Damage",
    "Frame",
    "GcLease",
    "GcMark",
    "Manifest",
    "ManifestBlob",
    "ManifestSubject",
    "Pack",
    "RecipeFrame",
    "Repository",
    "RepositoryBlob",
    "RepositoryManifest",
    "Tag",
    "UTCDateTime",
    "Upload",
    "UploadRecipe",
    "utcnow",
]

DIGEST = 144  # "sha512:" + 128 hex, with room
#: SQLite does not enforce VARCHAR lengths, so its columns keep the original 80 (widening them would
#: copy every table with foreign keys off); PostgreSQL's were widened by revision 0006.
DIGEST_TYPE = String(DIGEST).with_variant(String(80), "sqlite")


def _time(*, index: bool = False) -> Any:
    return Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False, index=index))


def _digest_fk(target: str, *, primary_key: bool = False, index: bool = False, ondelete: str = "CASCADE") -> Any:
    return Field(
        sa_column=Column(
            DIGEST_TYPE, ForeignKey(target, ondelete=ondelete), primary_key=primary_key, nullable=False, index=index
        )
    )


class BlobRole:
    """What a blob is to the manifest that lists it (``manifest_blobs.role``)."""

    CONFIG = "config"
    VMSTATE = "vmstate"
    CHUNK_MAP = "chunkmap"
    DATA = "data"
    MANIFEST = "manifest"  # a layer manifest listed by a chain index, or any manifest listed by an OCI index
    LAYER = "layer"  # a layer of a generic OCI image manifest (registry.oci_content)


class Repository(SQLModel, table=True):
    __tablename__ = "repositories"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_repositories_name"),)

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(sa_column=Column(String(64), nullable=False, index=True))
    name: str = Field(sa_column=Column(String(64), nullable=False))
    public: bool = False
    description: str = ""
    created_at: datetime = _time()
    updated_at: datetime = _time()
    pull_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    """Pulls of this repository: ``forkd pull`` (one chain answer) and forkd pack downloads (docs/web.md)."""
    readme: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    """A long Markdown description (the README), beside the short ``description``."""

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"


class Blob(SQLModel, table=True):
    __tablename__ = "blobs"

    digest: str = Field(sa_column=Column(DIGEST_TYPE, primary_key=True))
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    media_type: str | None = None
    created_at: datetime = _time(index=True)


class RepositoryBlob(SQLModel, table=True):
    __tablename__ = "repository_blobs"

    repository_id: int = Field(sa_column=Column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True))
    blob_digest: str = _digest_fk("blobs.digest", primary_key=True, index=True)
    created_at: datetime = _time()


class Manifest(SQLModel, table=True):
    __tablename__ = "manifests"

    digest: str = Field(sa_column=Column(DIGEST_TYPE, primary_key=True))
    size: int
    media_type: str
    artifact_type: str | None = None
    config_digest: str | None = Field(default=None, sa_column=Column(DIGEST_TYPE, nullable=True))
    parent_digest: str | None = Field(default=None, sa_column=Column(DIGEST_TYPE, nullable=True, index=True))
    created_at: datetime = _time(index=True)
    logical_size: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    stored_size: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    """Bytes of data blobs first uploaded for this layer."""
    shared_with_parent: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    """Bytes of the parent's files this layer reuses unchanged."""
    compat: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    annotations: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class ManifestBlob(SQLModel, table=True):
    __tablename__ = "manifest_blobs"

    manifest_digest: str = _digest_fk("manifests.digest", primary_key=True)
    blob_digest: str = _digest_fk("blobs.digest", primary_key=True, index=True, ondelete="RESTRICT")
    role: str = Field(sa_column=Column(String(16), nullable=False))


class ManifestSubject(SQLModel, table=True):
    """The manifest a generic OCI manifest names in ``subject`` (which need not exist): the referrers index."""

    __tablename__ = "manifest_subjects"

    manifest_digest: str = _digest_fk("manifests.digest", primary_key=True)
    subject_digest: str = Field(sa_column=Column(DIGEST_TYPE, nullable=False, index=True))


class RepositoryManifest(SQLModel, table=True):
    __tablename__ = "repository_manifests"

    repository_id: int = Field(sa_column=Column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True))
    manifest_digest: str = _digest_fk("manifests.digest", primary_key=True, index=True)
    created_at: datetime = _time()


class Tag(SQLModel, table=True):
    __tablename__ = "tags"

    repository_id: int = Field(sa_column=Column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True))
    name: str = Field(sa_column=Column(String(128), primary_key=True))
    manifest_digest: str = _digest_fk("manifests.digest", index=True, ondelete="RESTRICT")
    updated_at: datetime = _time()


class Chunk(SQLModel, table=True):
    """A chunk frame verified to decompress to ``digest``: ``length`` bytes at ``offset`` in a data blob."""

    __tablename__ = "chunks"
    __table_args__ = (
        UniqueConstraint("blob_digest", "offset", "length", "digest", name="uq_chunks_location"),
        Index("ix_chunks_digest", "digest"),
    )

    id: int | None = Field(default=None, primary_key=True)
    digest: str = Field(sa_column=Column(DIGEST_TYPE, nullable=False))
    blob_digest: str = _digest_fk("blobs.digest", index=True)
    offset: int = Field(sa_column=Column(BigInteger, nullable=False))
    length: int


class Pack(SQLModel, table=True):
    """An immutable pack object (``registry/paths.pack_key``) holding zstd frames back to back."""

    __tablename__ = "packs"

    key: str = Field(sa_column=Column(String(200), primary_key=True))
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = _time(index=True)


class Frame(SQLModel, table=True):
    """A zstd frame stored once, named by the blake3 of its bytes, verified to decompress to
    ``raw_length`` bytes hashing to ``chunk_digest``; ``length`` bytes at ``pack_offset`` in its pack."""

    __tablename__ = "frames"

    digest: str = Field(sa_column=Column(DIGEST_TYPE, primary_key=True))
    chunk_digest: str = Field(sa_column=Column(DIGEST_TYPE, nullable=False, index=True))
    raw_length: int
    pack_key: str = Field(
        sa_column=Column(String(200), ForeignKey("packs.key", ondelete="RESTRICT"), nullable=False, index=True)
    )
    pack_offset: int = Field(sa_column=Column(BigInteger, nullable=False))
    length: int


class RecipeFrame(SQLModel, table=True):
    """Frame ``frame_digest`` is the ``length`` bytes at ``offset`` of data blob ``blob_digest``
    (a blob stored as a recipe: its frames in order, end to end, are its exact bytes)."""

    __tablename__ = "recipe_frames"

    blob_digest: str = _digest_fk("blobs.digest", primary_key=True)
    offset: int = Field(sa_column=Column(BigInteger, primary_key=True))
    frame_digest: str = _digest_fk("frames.digest", index=True, ondelete="RESTRICT")
    length: int


class Upload(SQLModel, table=True):
    __tablename__ = "uploads"

    id: str = Field(sa_column=Column(String(36), primary_key=True))
    repository_id: int = Field(sa_column=Column(ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False))
    size: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = _time()
    updated_at: datetime = _time(index=True)
    lease_owner: str | None = Field(default=None, sa_column=Column(String(36), nullable=True))
    """The request (any replica) working on this session now; see ``registry/push/uploads.py``."""
    lease_until: datetime | None = Field(default=None, sa_column=Column(UTCDateTime(), nullable=True))
    opened_by: str | None = Field(default=None, sa_column=Column(String(64), nullable=True))
    """The name of the token that opened the session: with pull alone it may still read and cancel it."""


class UploadRecipe(SQLModel, table=True):
    """A data blob's recipe declared when its upload session opened, and how far the frames that
    streamed in since are verified (``registry/push/upload_verify.py``); any replica continues it."""

    __tablename__ = "upload_recipes"

    upload_id: str = Field(sa_column=Column(String(36), ForeignKey("uploads.id", ondelete="CASCADE"), primary_key=True))
    recipe: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    """The recipe as declared: its JSON document, or, declared in parts, one JSON list of frames per line."""
    next_frame: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    """Frames before this one are verified and hashed."""
    consumed: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    """Session bytes those frames took; ``consumed + len(carry)`` is the session's size."""
    carry: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False))
    """The start of the next frame, when a PATCH ended inside it."""
    sha256_state: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    hashed: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    """Bytes of the blob hashed so far (uploaded and held frames)."""
    valid: bool = Field(default=True, sa_column=Column(Boolean, nullable=False))
    """False once the state fell behind the session's bytes: the finish verifies them all again."""


class GcLease(SQLModel, table=True):
    """Held by the replica sweeping now (``registry/gclease.py``); expires if that replica dies."""

    __tablename__ = "gc_leases"

    name: str = Field(sa_column=Column(String(32), primary_key=True))
    holder: str = Field(sa_column=Column(String(128), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class GcMark(SQLModel, table=True):
    """A manifest or blob GC found unreferenced, and since when; it is swept a grace period later."""

    __tablename__ = "gc_marks"

    kind: str = Field(sa_column=Column(String(16), primary_key=True))
    digest: str = Field(sa_column=Column(DIGEST_TYPE, primary_key=True))
    unreferenced_since: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class Damage(SQLModel, table=True):
    """Stored content found damaged, by storage key: refused cheaply afterwards, never silently deleted.

    ``kind``: ``forkd-pack`` (a forkd pack whose build failed on damaged content, ``registry/forkd/compat.py``),
    ``forkd-link`` (a layer whose assembled file is not the sha256 its config declares, keyed ``forkd-link/DIGEST``),
    or what ``forkd-hub verify`` checked (``blob``, ``recipe``, ``pack``, ``frame``); ``moved_to``: where
    ``verify --quarantine`` moved the object (None: left in place, or nothing to move).
    """

    __tablename__ = "damage"

    key: str = Field(sa_column=Column(String(255), primary_key=True))
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    reason: str = Field(sa_column=Column(Text, nullable=False))
    found_at: datetime = _time()
    moved_to: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
