"""The layer page's read model: one layer's chain (base → head) with each link's sizes, the
readable tags whose chains include it, its files, compatibility metadata, annotations, the
referrers attached to it (provenance, signatures: artifact type, digest, annotations) and the
raw manifest and config, pretty-printed.

Sizes per link: ``logical`` (the files' full sizes), ``stored`` (bytes of data blobs first
uploaded by this layer) and ``shared`` (bytes of the parent's files reused unchanged).

Errors: ``HubError`` (``NAME_INVALID``, ``NAME_UNKNOWN``, ``MANIFEST_UNKNOWN``, ``DIGEST_INVALID``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Repository, Tag
from hub_server.registry.content.signature_policy import SignatureClaim, signature_claims
from hub_server.registry.content.tags import resolve_reference
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import parse_reference
from hub_server.registry.core.paths import blob_key
from hub_server.registry.read.lineage import Dependent, LinkRef, locate_links, readable_dependents, resolve_layers
from hub_server.registry.read.referrers import ReferrerService
from hub_server.registry.read.search import visible
from hub_server.storage.errors import StorageError
from manifest import mediatypes as mt

__all__ = ["FileRow", "LayerView", "LinkView", "layer_view"]


@dataclass(frozen=True)
class LinkView:
    digest: str
    repository: str
    tags: list[str]
    logical_size: int
    stored_size: int
    shared_with_parent: int
    created: datetime


@dataclass(frozen=True)
class FileRow:
    """One file of the layer: its role, full size and content digest, and its chunk map's size."""

    role: str
    size: int
    digest: str
    chunk_map_size: int | None


@dataclass(frozen=True)
class LayerView:
    namespace: str
    name: str
    public: bool
    ref: str
    digest: str
    index_digest: str | None
    media_type: str
    config_digest: str | None
    links: list[LinkView]
    dependents: list[Dependent]
    compat: dict[str, Any]
    annotations: dict[str, str]
    files: list[FileRow]
    manifest_text: str
    config_text: str
    #: OCI referrers of the layer (``digest``, ``artifactType``, ``annotations``), oldest first
    referrers: list[dict[str, Any]]
    signatures: list[SignatureClaim] = field(default_factory=list)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def head(self) -> LinkView:
        return self.links[-1]


async def layer_view(ctx: RegistryContext, scope: RepositoryScope, ref: str) -> LayerView:
    """Everything the layer page shows about the repository of ``scope`` (``pull``) at ``ref``."""
    principal = scope.principal
    async with ctx.sessions() as session:
        repo, rows = await resolve_layers(session, scope, ref)
        named = await resolve_reference(session, repo, parse_reference(ref))
        places = await _tagged_places(
            session, principal, await locate_links(session, principal, repo, [r.digest for r in rows])
        )
        dependents = await readable_dependents(session, principal, rows[-1].digest)
    head = rows[-1]
    links = [
        LinkView(r.digest, p.repository, p.tags, r.logical_size, r.stored_size, r.shared_with_parent, r.created_at)
        for r, p in zip(rows, places, strict=True)
    ]
    manifest = await _document(ctx, head.digest)
    config = await _document(ctx, head.config_digest) if head.config_digest else None
    referrers = await ReferrerService(ctx).list(scope, head.digest)
    return LayerView(
        namespace=repo.namespace,
        name=repo.name,
        public=repo.public,
        ref=ref,
        digest=head.digest,
        index_digest=named if named != head.digest else None,
        media_type=head.media_type,
        config_digest=head.config_digest,
        links=links,
        dependents=[d for d in dependents if d.digest != head.digest],
        compat=dict(head.compat),
        annotations=dict(head.annotations),
        files=_files(manifest, config),
        manifest_text=_pretty(manifest),
        config_text=_pretty(config) if config is not None else "",
        referrers=referrers,
        signatures=await signature_claims(ctx, repo.id, repo.namespace, repo.name, head.digest),  # type: ignore[arg-type]
    )


async def _tagged_places(session: AsyncSession, principal: Principal, places: list[LinkRef]) -> list[LinkRef]:
    """Links untagged where they were found, moved to a readable repository that tags them (if any),
    so the graph says ``acme/py-base:3.12`` rather than a bare digest."""
    untagged = [p.digest for p in places if not p.tags]
    if not untagged:
        return places
    rows = (
        await session.exec(
            select(Tag.manifest_digest, Tag.name, Repository.namespace, Repository.name)
            .join(Repository, col(Repository.id) == col(Tag.repository_id))
            .where(col(Tag.manifest_digest).in_(untagged), visible(principal))
            .order_by(col(Repository.namespace), col(Repository.name), col(Tag.name))
        )
    ).all()
    found: dict[str, LinkRef] = {}
    for digest, tag, namespace, name in rows:
        found.setdefault(digest, LinkRef(digest, f"{namespace}/{name}", [tag]))
    return [found.get(p.digest, p) if not p.tags else p for p in places]


async def _document(ctx: RegistryContext, digest: str) -> Any:
    """A stored JSON document, parsed; the raw text when it is not JSON; None when it is gone."""
    try:
        data = await ctx.store.read(blob_key(digest))
    except (StorageError, FileNotFoundError):
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def _pretty(document: Any) -> str:
    if document is None:
        return "(not available)"
    if isinstance(document, str):
        return document
    return json.dumps(document, indent=2, ensure_ascii=False)


def _files(manifest: Any, config: Any) -> list[FileRow]:
    if not isinstance(config, dict) or not isinstance(config.get("files"), dict):
        return []
    maps: dict[str, int] = {}
    for layer in (manifest.get("layers") if isinstance(manifest, dict) else None) or []:
        if isinstance(layer, dict) and isinstance(layer.get("annotations"), dict):
            role = layer["annotations"].get(mt.ANNOTATION_FILE)
            if isinstance(role, str) and isinstance(layer.get("size"), int):
                maps[role] = layer["size"]
    out = []
    for role, info in config["files"].items():
        if isinstance(info, dict):
            out.append(FileRow(str(role), int(info.get("size") or 0), str(info.get("digest") or ""), maps.get(role)))
    return out
