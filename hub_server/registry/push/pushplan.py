"""Planning a manifest push: every check that needs the database or stored blobs, in the documented order.

:func:`plan_layer` and :func:`plan_index` read what a pushed document references and return a
:class:`PushPlan` — everything the final transaction needs — or raise the first failure:

1. every descriptor's blob exists and is linked to the repository or readable elsewhere
   (``MANIFEST_BLOB_UNKNOWN`` lists all missing), with the declared size (``SIZE_INVALID``);
2. the config parses (``MANIFEST_INVALID``);
3. the parent manifest exists and is readable (``PARENT_UNKNOWN``), and the chain is no deeper
   than the limit (``CHAIN_TOO_DEEP``);
4. every chunk map parses and agrees with the manifest, the config and the parent's config;
5. the chunk frames not verified before are listed for :func:`verify.verify_frames`, and (format
   v2) the chunk maps whose file digests are proven after them (:mod:`filetrees`, O(chunks)) and
   the whole-file sha256 each declares (:mod:`filesha`, O(file size)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Blob, BlobRole, Chunk, Manifest, ManifestBlob, Repository, RepositoryBlob
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.blobs import read_blob_bytes
from hub_server.registry.core.access import readable_linking
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.sql import batched
from hub_server.registry.push.limits import check_files
from hub_server.registry.push.verify import (
    ChainIndex,
    FrameCheck,
    check_chunk_map,
    check_config_files,
    invalid,
    plan_frames,
    require_utf8,
    shared_bytes,
)
from hub_server.registry.push.vmstate import check_vmstate
from manifest import mediatypes as mt
from manifest.chain import resolve_chain
from manifest.errors import ChainCycle, ChainTooDeep, ManifestError, MissingParent
from manifest.model import ChunkMap, Descriptor, LayerConfig, LayerManifest

__all__ = ["PushPlan", "plan_index", "plan_layer"]

_ROLES = {
    **{t["config"]: BlobRole.CONFIG for t in mt.VERSIONS.values()},
    **{t["vmstate"]: BlobRole.VMSTATE for t in mt.VERSIONS.values()},
    **{t["chunkmap"]: BlobRole.CHUNK_MAP for t in mt.VERSIONS.values()},
    **{t["data"]: BlobRole.DATA for t in mt.VERSIONS.values()},
}


@dataclass
class PushPlan:
    """What the commit of a verified push writes."""

    media_type: str
    artifact_type: str | None
    config_digest: str | None = None
    parent_digest: str | None = None
    logical_size: int = 0
    shared_with_parent: int = 0
    compat: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    blob_roles: dict[str, str] = field(default_factory=dict)
    """Blob digest → role, for every blob the document references."""
    blob_media_types: dict[str, str] = field(default_factory=dict)
    ancestors: list[str] = field(default_factory=list)
    """Manifest digests of the chain below this one, base first (linked into the repository too)."""
    frames: list[FrameCheck] = field(default_factory=list)
    """Chunk frames never verified before: to verify now, then record."""
    blob_sizes: dict[str, int] = field(default_factory=dict)
    reused_frames: int = 0
    subject_digest: str | None = None
    """The manifest a generic OCI manifest refers to (``subject``: the referrers API)."""
    proven_maps: list[ChunkMap] = field(default_factory=list)
    """Format v2: the chunk maps whose file digests :func:`filetrees.prove_file_digests` proves
    once the frames are verified."""
    file_sha256: dict[str, str] = field(default_factory=dict)
    """Format v2: each chunked file's declared whole-file sha256, proven by :mod:`filesha`."""
    unchanged_files: set[str] = field(default_factory=set)
    """Chunked files the layer leaves as its parent had them (no entries, same size and sha256): not hashed."""


async def plan_layer(
    ctx: RegistryContext,
    session: AsyncSession,
    principal: Principal,
    repo: Repository | None,
    digest: str,
    manifest: LayerManifest,
) -> PushPlan:
    """Check a layer manifest against what the hub holds (see the module docstring)."""
    descriptors = [manifest.config, *manifest.layers]
    blobs = await _readable_blobs(session, principal, repo, [d.digest for d in descriptors])
    _check_sizes(descriptors, blobs)
    limits = ctx.limits

    raw_config = await read_blob_bytes(ctx, manifest.config.digest, limits.config_bytes, "config")
    require_utf8(raw_config, "config")
    config = await _parse(LayerConfig, raw_config, limits.config_bytes, "config")
    check_config_files(manifest, config)
    check_files(config.files, mt.CHUNKED_FILES, limits.file_bytes, limits.file_chunks)  # before any chunk list
    await check_vmstate(ctx, manifest.vmstate, config.files[mt.VMSTATE_FILE])

    ancestors: list[str] = []
    parent_config: LayerConfig | None = None
    if config.parent is not None:
        ancestors = await _ancestors(session, principal, digest, config.parent.digest, limits.chain_depth)
        parent = await session.get(Manifest, config.parent.digest)
        assert parent is not None and parent.config_digest is not None
        raw_parent = await read_blob_bytes(ctx, parent.config_digest, limits.config_bytes, "parent config")
        parent_config = await _parse(LayerConfig, raw_parent, limits.config_bytes, "parent config")
        if parent_config.version != config.version:
            raise invalid(
                f"a format-version-{config.version} layer cannot apply to parent {config.parent.digest}, "
                f"a version-{parent_config.version} layer: push the whole chain again",
                field="parent",
            )

    data_blobs = {d.digest for d in manifest.data_blobs}
    maps: list[ChunkMap] = []
    for file, desc in manifest.chunk_maps.items():
        raw = await read_blob_bytes(ctx, desc.digest, limits.chunk_map_bytes, "chunk map")
        chunk_map = await _parse(ChunkMap, raw, limits.chunk_map_bytes, f"chunk map {desc.digest} ({file})")
        check_chunk_map(chunk_map, desc, config, parent_config, data_blobs)
        if chunk_map.version != manifest.version:
            raise invalid(
                f"chunk map {desc.digest} is format version {chunk_map.version}, the manifest {manifest.version}",
                digest=desc.digest,
                field="mediaType",
            )
        maps.append(chunk_map)
    if manifest.version >= 2:  # a v2 layer lists its own data blobs, nothing else (identity is content)
        used = {b for cm in maps for b in cm.blobs}
        if used != data_blobs:
            raise invalid(
                f"data blobs {sorted(data_blobs - used)} are listed but no chunk map uses them", field="layers"
            )

    frames = plan_frames(maps)
    known = await _verified_locations(session, frames)
    new = [f for f in frames if f.location not in known]
    return PushPlan(
        media_type=mt.OCI_MANIFEST,
        artifact_type=mt.VERSIONS[manifest.version]["layer"],
        config_digest=manifest.config.digest,
        parent_digest=config.parent.digest if config.parent else None,
        logical_size=sum(f.size for f in config.files.values()),
        shared_with_parent=shared_bytes(maps, parent_config),
        compat=dict(config.compat),
        annotations={**config.annotations, **manifest.annotations},
        blob_roles={d.digest: _ROLES[d.media_type] for d in descriptors},
        blob_media_types={d.digest: d.media_type for d in descriptors},
        ancestors=ancestors,
        frames=new,
        blob_sizes={d: b.size for d, b in blobs.items()},
        reused_frames=len(frames) - len(new),
        proven_maps=maps if manifest.version >= 2 else [],
        file_sha256=_declared_sha256(maps, config) if manifest.version >= 2 else {},
        unchanged_files=_unchanged(maps, config, parent_config),
    )


def _declared_sha256(maps: list[ChunkMap], config: LayerConfig) -> dict[str, str]:
    return {m.file: sha for m in maps if (sha := config.files[m.file].sha256) is not None}


def _unchanged(maps: list[ChunkMap], config: LayerConfig, parent_config: LayerConfig | None) -> set[str]:
    """Files whose bytes are the parent's: no entry, the parent's size, the parent's declared sha256."""
    if parent_config is None:
        return set()
    out = set()
    for m in maps:
        parent = parent_config.files.get(m.file)
        if (
            parent is not None
            and not m.entries
            and parent.size == m.size
            and parent.sha256 == config.files[m.file].sha256
        ):
            out.add(m.file)
    return out


async def plan_index(
    ctx: RegistryContext, session: AsyncSession, principal: Principal, repo: Repository | None, index: ChainIndex
) -> PushPlan:
    """Check a chain index: its manifests exist, are readable layers, and form one chain base → head."""
    digests = [d.digest for d in index.manifests]
    rows = {
        m.digest: m
        for batch in batched(digests)
        for m in (await session.exec(select(Manifest).where(col(Manifest.digest).in_(batch)))).all()
    }
    readable = await readable_linking(session, principal, manifests=digests)
    missing = [d for d in digests if d not in rows or d not in readable]
    if missing:
        raise HubError(
            ErrorCode.MANIFEST_BLOB_UNKNOWN,
            f"the index lists {len(missing)} manifest(s) this repository cannot reach",
            {"blobs": missing},
        )
    if len(digests) > ctx.limits.chain_depth:
        raise HubError(
            ErrorCode.CHAIN_TOO_DEEP,
            f"the index lists {len(digests)} links, over the limit of {ctx.limits.chain_depth}",
            {"limit": ctx.limits.chain_depth},
        )
    previous: str | None = None
    for i, d in enumerate(index.manifests):
        row = rows[d.digest]
        if not mt.is_layer(row.artifact_type):
            raise invalid(f"index.manifests[{i}] ({d.digest}) is not a layer manifest", field=f"manifests[{i}]")
        if row.size != d.size:
            raise HubError(
                ErrorCode.SIZE_INVALID,
                f"index.manifests[{i}] declares {d.size} bytes, the manifest has {row.size}",
                {"digest": d.digest, "declared": d.size, "actual": row.size},
            )
        if row.parent_digest != previous:
            raise invalid(
                f"index.manifests[{i}] ({d.digest}) has parent {row.parent_digest}, expected {previous} "
                "(list the chain base → head)",
                field=f"manifests[{i}]",
            )
        previous = d.digest
    return PushPlan(
        media_type=mt.OCI_INDEX,
        artifact_type=mt.CHAIN_ARTIFACT,
        annotations=dict(index.annotations),
        blob_roles=dict.fromkeys(digests, BlobRole.MANIFEST),
        ancestors=digests,
    )


async def _parse(kind: Any, raw: bytes, limit: int, what: str) -> Any:
    try:
        # Big chunk maps take a while to parse: keep the event loop free.
        return await anyio.to_thread.run_sync(lambda: kind.from_json(raw, limit=limit))
    except ManifestError as e:
        raise invalid(f"{what}: {e}") from None


async def _readable_blobs(
    session: AsyncSession, principal: Principal, repo: Repository | None, digests: list[str]
) -> dict[str, Blob]:
    """The blobs among ``digests`` linked to ``repo`` or readable by ``principal`` elsewhere."""
    rows: dict[str, Blob] = {}
    for batch in batched(digests):
        rows.update((b.digest, b) for b in (await session.exec(select(Blob).where(col(Blob.digest).in_(batch)))).all())
    here: set[str] = set()
    if repo is not None:
        for batch in batched(rows):
            result = await session.exec(
                select(RepositoryBlob.blob_digest).where(
                    RepositoryBlob.repository_id == repo.id, col(RepositoryBlob.blob_digest).in_(batch)
                )
            )
            here.update(result.all())
    elsewhere = await readable_linking(session, principal, blobs=[d for d in rows if d not in here])
    missing = [d for d in digests if d not in here and d not in elsewhere]
    if missing:
        raise HubError(
            ErrorCode.MANIFEST_BLOB_UNKNOWN,
            f"the manifest references {len(missing)} blob(s) this repository does not hold",
            {"blobs": missing},
        )
    return rows


def _check_sizes(descriptors: list[Descriptor], blobs: dict[str, Blob]) -> None:
    for d in descriptors:
        actual = blobs[d.digest].size
        if actual != d.size:
            raise HubError(
                ErrorCode.SIZE_INVALID,
                f"descriptor {d.digest} declares {d.size} bytes, the blob has {actual}",
                {"digest": d.digest, "declared": d.size, "actual": actual},
            )


async def _ancestors(session: AsyncSession, principal: Principal, digest: str, parent: str, depth: int) -> list[str]:
    """The chain under a new manifest, base first. Raises PARENT_UNKNOWN, CHAIN_TOO_DEEP."""
    row = await session.get(Manifest, parent)
    if (
        row is None
        or not mt.is_layer(row.artifact_type)
        or not await readable_linking(session, principal, manifests=[parent])
    ):
        raise HubError(
            ErrorCode.PARENT_UNKNOWN, f"parent manifest {parent} does not exist or is not readable", {"digest": parent}
        )
    parents: dict[str, str | None] = {digest: parent}
    cursor: str | None = parent
    while cursor is not None and cursor not in parents and len(parents) <= depth:
        found = await session.get(Manifest, cursor)
        if found is None:
            break  # resolve_chain reports it
        parents[cursor] = found.parent_digest
        cursor = found.parent_digest
    try:
        chain = resolve_chain(digest, lambda k: parents[k], max_depth=depth)
    except ChainTooDeep:
        raise HubError(
            ErrorCode.CHAIN_TOO_DEEP, f"the chain under this manifest is deeper than {depth} links", {"limit": depth}
        ) from None
    except (MissingParent, ChainCycle) as e:
        raise HubError(ErrorCode.PARENT_UNKNOWN, str(e), {"digest": parent}) from None
    return chain[:-1]


async def _verified_locations(session: AsyncSession, frames: list[FrameCheck]) -> set[tuple[str, int, int, str]]:
    known: set[tuple[str, int, int, str]] = set()
    for batch in batched(sorted({f.digest for f in frames})):
        rows = await session.exec(
            select(Chunk.blob_digest, Chunk.offset, Chunk.length, Chunk.digest).where(col(Chunk.digest).in_(batch))
        )
        known.update(tuple(r) for r in rows.all())  # type: ignore[misc]
    return known


async def data_blobs_first_uploaded(session: AsyncSession, plan: PushPlan) -> int:
    """Bytes of this push's data blobs that no earlier manifest lists (its ``stored_size``)."""
    data = [d for d, role in plan.blob_roles.items() if role == BlobRole.DATA]
    seen: set[str] = set()
    for batch in batched(data):
        rows = await session.exec(
            select(ManifestBlob.blob_digest).where(
                col(ManifestBlob.blob_digest).in_(batch), ManifestBlob.role == BlobRole.DATA
            )
        )
        seen.update(rows.all())
    return sum(plan.blob_sizes.get(d, 0) for d in data if d not in seen)
