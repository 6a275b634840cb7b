"""What one push may add to what a repository holds (docs/limits.md), each refusal a typed wire error.

- :func:`check_files`: a layer's chunked files (memory.bin, rootfs.ext4) declare sizes the hub turns
  into a chunk list of 32 bytes a chunk while it proves their digests: at most ``limits.file_bytes``
  and ``limits.file_chunks`` chunks each (``TOO_LARGE``), checked from the config before any chunk map
  is read, so a 2 KB push declaring a 1 TiB file of 4 KiB chunks costs the hub nothing (issue 27, item 2).
- :func:`check_annotations`: a manifest's annotations (a forkd layer's config annotations with them)
  are copied into the database and served with every referrers list and layer page: at most
  ``limits.annotation_bytes`` of compact JSON (``TOO_LARGE``), checked before anything is read.
- :func:`check_referrers`: at most ``limits.referrers_per_subject`` manifests in one repository name
  the same ``subject`` (``QUOTA_EXCEEDED``), so a referrers list, a signature check and a layer page
  read a bounded number of rows whatever a pusher does.
- :func:`check_tags`: at most ``limits.tags_per_repository`` tags in a repository (``QUOTA_EXCEEDED``).

The counts are read in the push's own transaction, just before its rows are written; two pushes
committing at the same moment may each see the other's row missing, so a limit can be passed by at
most the number of concurrent pushes, never by more.

Errors: ``HubError(TOO_LARGE)``, ``HubError(QUOTA_EXCEEDED)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import ManifestSubject, RepositoryManifest, Tag
from hub_server.errors import ErrorCode, HubError
from manifest.chunking import MIN_CHUNK_SIZE
from manifest.model import FileInfo

__all__ = ["annotation_bytes", "check_annotations", "check_files", "check_referrers", "check_tags", "over_quota"]


def annotation_bytes(annotations: dict[str, Any]) -> int:
    """The size of ``annotations`` as the database and the referrers API hold them (compact JSON, UTF-8)."""
    return len(json.dumps(annotations, separators=(",", ":"), ensure_ascii=False).encode())


def check_files(files: Mapping[str, FileInfo], chunked: Iterable[str], file_bytes: int, file_chunks: int) -> None:
    """Raises HubError(TOO_LARGE) when a chunked file in ``files`` declares more than ``file_bytes`` bytes or
    more than ``file_chunks`` chunks (its ``chunkSize`` when given, else the smallest a map may use)."""
    for name in chunked:
        info = files.get(name)
        if info is None:
            continue
        chunk_size = info.chunk_size or MIN_CHUNK_SIZE
        chunks = -(-info.size // chunk_size)
        if info.size > file_bytes or chunks > file_chunks:
            raise HubError(
                ErrorCode.TOO_LARGE,
                f"{name} declares {info.size} bytes in {chunks} chunks of {chunk_size}: over the limit of "
                f"{file_bytes} bytes and {file_chunks} chunks a file may have (FORKD_HUB_FILE_BYTES, "
                "FORKD_HUB_FILE_CHUNKS; larger chunks make fewer)",
                {"file": name, "size": info.size, "chunks": chunks, "limit": file_bytes, "chunkLimit": file_chunks},
            )


def check_annotations(annotations: dict[str, Any], limit: int) -> None:
    """Raises HubError(TOO_LARGE) when ``annotations`` take more than ``limit`` bytes."""
    size = annotation_bytes(annotations)
    if size > limit:
        raise HubError(
            ErrorCode.TOO_LARGE,
            f"the manifest's annotations take {size} bytes, over the {limit}-byte limit (FORKD_HUB_ANNOTATION_BYTES)",
            {"limit": limit, "size": size, "field": "annotations"},
        )


def over_quota(what: str, limit: int, used: int, detail: dict[str, Any] | None = None, *, hint: str = "") -> HubError:
    """The ``QUOTA_EXCEEDED`` answer: ``what`` is at its ``limit`` (``used`` now)."""
    message = f"{what}: {used} of {limit} used" + (f"; {hint}" if hint else "")
    return HubError(ErrorCode.QUOTA_EXCEEDED, message, {"quota": what, "limit": limit, "used": used, **(detail or {})})


async def check_referrers(session: AsyncSession, repository_id: int, subject: str, digest: str, limit: int) -> None:
    """Before ``digest`` (naming ``subject``) is linked to the repository: raise HubError(QUOTA_EXCEEDED)
    when the repository already holds ``limit`` other manifests naming that subject."""
    count = (
        await session.exec(
            select(func.count())
            .select_from(ManifestSubject)
            .join(RepositoryManifest, col(RepositoryManifest.manifest_digest) == col(ManifestSubject.manifest_digest))
            .where(
                col(RepositoryManifest.repository_id) == repository_id,
                col(ManifestSubject.subject_digest) == subject,
                col(ManifestSubject.manifest_digest) != digest,
            )
        )
    ).one()
    if count >= limit:
        raise over_quota(
            "referrers per subject",
            limit,
            int(count),
            {"subject": subject},
            hint="delete old referrers of this subject (signatures, provenance) first (FORKD_HUB_REFERRERS_PER_SUBJECT)",
        )


async def check_tags(session: AsyncSession, repository_id: int, tag: str, limit: int) -> None:
    """Before ``tag`` is set in the repository: raise HubError(QUOTA_EXCEEDED) when it would be one tag
    more than ``limit`` (moving an existing tag is always allowed)."""
    if await session.get(Tag, (repository_id, tag)) is not None:
        return
    count = (
        await session.exec(select(func.count()).select_from(Tag).where(col(Tag.repository_id) == repository_id))
    ).one()
    if count >= limit:
        raise over_quota(
            "tags per repository",
            limit,
            int(count),
            {"tag": tag},
            hint="delete tags, or let a retention policy expire them (FORKD_HUB_TAGS_PER_REPOSITORY)",
        )
