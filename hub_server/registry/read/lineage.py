"""Chains and lineage: a layer's whole chain base → head in one answer, its ancestors and dependents.

A reference naming a chain index resolves to the index's head layer. Each link of a chain is
reported with the repository to fetch its blobs through: the requested one when the link is
there (pushes link the chain below a manifest into its repository), else a repository linking
it that the caller may read, else the requested one (a parent deleted with ``force`` stays
reachable through its children).

Errors: ``HubError`` (``NAME_INVALID``, ``NAME_UNKNOWN``, ``MANIFEST_UNKNOWN``, ``DIGEST_INVALID``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import BlobRole, Manifest, ManifestBlob, Repository, RepositoryManifest, Tag
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.tags import resolve_reference, tags_by_digest
from hub_server.registry.core.access import RepositoryScope, can_read, readable_linking
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import parse_reference
from hub_server.registry.core.paths import blob_key
from hub_server.registry.core.sql import batched
from manifest import mediatypes as mt
from manifest.chain import resolve_chain
from manifest.errors import ChainError

__all__ = [
    "Chain",
    "ChainLink",
    "Dependent",
    "Lineage",
    "LineageService",
    "LinkRef",
    "locate_links",
    "readable_dependents",
    "resolve_layers",
]

#: Stored chains were depth-checked at push; this only guards the walk against bad data.
WALK_LIMIT = 1024


@dataclass(frozen=True)
class LinkRef:
    digest: str
    repository: str
    tags: list[str]


@dataclass(frozen=True)
class ChainLink:
    digest: str
    media_type: str
    size: int
    manifest: str
    config: str
    repository: str
    tags: list[str]


@dataclass(frozen=True)
class Chain:
    digest: str
    links: list[ChainLink]


@dataclass(frozen=True)
class Dependent:
    repository: str
    tag: str
    digest: str


@dataclass(frozen=True)
class Lineage:
    digest: str
    depth: int
    ancestors: list[LinkRef]
    dependents: list[Dependent]
    logical_size: int
    stored_size: int
    shared_with_parent: int


class LineageService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def chain(self, scope: RepositoryScope, ref: str, *, count_pull: bool = True) -> Chain:
        """The chain ``ref`` names in the repository of ``scope`` (``pull``), base → head, with exact
        manifest and config bytes.

        With ``count_pull`` the answer counts as one pull of the repository (``repositories.pull_count``):
        what a user calls a pull is one ``forkd pull`` (which asks for its chain once) or one forkd pack
        download; the hub building a pack for ``registry.json`` passes False (docs/web.md, "Pull counts").
        """
        async with self.ctx.sessions() as session:
            repo, rows = await resolve_layers(session, scope, ref)
            refs = await locate_links(session, scope.principal, repo, [r.digest for r in rows])
            if count_pull:
                await session.exec(
                    update(Repository)
                    .where(col(Repository.id) == repo.id)
                    .values(pull_count=col(Repository.pull_count) + 1)
                )
                await session.commit()
        links = []
        for row, where in zip(rows, refs, strict=True):
            manifest = await self.ctx.store.read(blob_key(row.digest))
            config = await self.ctx.store.read(blob_key(row.config_digest)) if row.config_digest else b""
            links.append(
                ChainLink(
                    row.digest,
                    row.media_type,
                    row.size,
                    manifest.decode(),
                    config.decode(),
                    where.repository,
                    where.tags,
                )
            )
        return Chain(rows[-1].digest, links)

    async def lineage(self, scope: RepositoryScope, ref: str) -> Lineage:
        """Ancestors, dependents (tags whose chains include this layer) and sizes of the layer ``ref`` names
        in the repository of ``scope`` (``pull``)."""
        async with self.ctx.sessions() as session:
            repo, rows = await resolve_layers(session, scope, ref)
            head = rows[-1]
            ancestors = await locate_links(session, scope.principal, repo, [r.digest for r in rows[:-1]])
            dependents = await readable_dependents(session, scope.principal, head.digest)
        return Lineage(
            head.digest, len(rows), ancestors, dependents, head.logical_size, head.stored_size, head.shared_with_parent
        )


async def resolve_layers(session: AsyncSession, scope: RepositoryScope, ref: str) -> tuple[Repository, list[Manifest]]:
    """The repository of ``scope`` (``pull``) and the layers of the chain ``ref`` names there, base → head.

    Raises HubError(MANIFEST_UNKNOWN / DIGEST_INVALID / NAME_INVALID (a bad tag)).
    """
    reference = parse_reference(ref)
    repo = scope.row
    digest = await resolve_reference(session, repo, reference)
    head = await session.get(Manifest, digest)
    assert head is not None
    if head.artifact_type == mt.CHAIN_ARTIFACT:
        head = await _index_head(session, head.digest)
    return repo, await _walk(session, head)


async def _index_head(session: AsyncSession, index_digest: str) -> Manifest:
    children = (
        await session.exec(
            select(Manifest)
            .join(ManifestBlob, ManifestBlob.blob_digest == Manifest.digest)  # type: ignore[arg-type]
            .where(ManifestBlob.manifest_digest == index_digest, ManifestBlob.role == BlobRole.MANIFEST)
        )
    ).all()
    parents = {c.parent_digest for c in children}
    heads = [c for c in children if c.digest not in parents]
    if len(heads) != 1:  # pragma: no cover - indexes are checked to list one chain at push
        raise HubError(ErrorCode.MANIFEST_UNKNOWN, f"chain index {index_digest} has no single head", {})
    return heads[0]


async def _walk(session: AsyncSession, head: Manifest) -> list[Manifest]:
    rows = {head.digest: head}

    def parent_of(digest: str) -> str | None:
        return rows[digest].parent_digest

    cursor = head.parent_digest
    while cursor is not None and cursor not in rows and len(rows) < WALK_LIMIT:
        row = await session.get(Manifest, cursor)
        if row is None:
            break
        rows[cursor] = row
        cursor = row.parent_digest
    try:
        order = resolve_chain(head.digest, parent_of, max_depth=WALK_LIMIT)
    except (ChainError, KeyError) as e:
        raise HubError(
            ErrorCode.MANIFEST_UNKNOWN, f"the chain of {head.digest} is broken: {e}", {"digest": head.digest}
        ) from None
    return [rows[d] for d in order]


async def locate_links(
    session: AsyncSession, principal: Principal, repo: Repository, digests: list[str]
) -> list[LinkRef]:
    """Where to fetch each manifest: ``repo`` if linked there, else a readable repository linking it."""
    here: set[str] = set()
    for batch in batched(digests):
        rows = await session.exec(
            select(RepositoryManifest.manifest_digest).where(
                RepositoryManifest.repository_id == repo.id, col(RepositoryManifest.manifest_digest).in_(batch)
            )
        )
        here.update(rows.all())
    elsewhere = await readable_linking(session, principal, manifests=[d for d in digests if d not in here])
    owners = {d: (repo if d in here or d not in elsewhere else elsewhere[d][0]) for d in digests}
    tags: dict[tuple[int, str], list[str]] = {}
    for owner in {o.id: o for o in owners.values()}.values():
        mine = [d for d, o in owners.items() if o.id == owner.id]
        for digest, names in (await tags_by_digest(session, owner.id, mine)).items():  # type: ignore[arg-type]
            tags[(owner.id, digest)] = names  # type: ignore[index]
    return [LinkRef(d, owners[d].full_name, tags.get((owners[d].id, d), [])) for d in digests]  # type: ignore[arg-type]


async def descendants(session: AsyncSession, digest: str) -> list[str]:
    """Every manifest whose chain includes ``digest`` (children, grandchildren, …), nearest first."""
    found: list[str] = []
    seen = {digest}
    frontier = [digest]
    while frontier and len(found) < 100_000:
        children: list[str] = []
        for batch in batched(frontier):
            rows = await session.exec(select(Manifest.digest).where(col(Manifest.parent_digest).in_(batch)))
            children.extend(d for d in rows.all() if d not in seen)
        seen.update(children)
        found.extend(children)
        frontier = children
    return found


async def readable_dependents(session: AsyncSession, principal: Principal, digest: str) -> list[Dependent]:
    out: list[Dependent] = []
    for batch in batched(await descendants(session, digest)):
        rows = await session.exec(
            select(Tag, Repository)
            .join(Repository, Repository.id == Tag.repository_id)  # type: ignore[arg-type]
            .where(col(Tag.manifest_digest).in_(batch))
        )
        out.extend(Dependent(r.full_name, t.name, t.manifest_digest) for t, r in rows.all() if can_read(principal, r))
    return sorted(out, key=lambda d: (d.repository, d.tag))
