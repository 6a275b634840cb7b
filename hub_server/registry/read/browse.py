"""``BrowseService``: the read model the web catalog renders (``web`` imports only this and its
dataclasses). Every answer is filtered to what the caller may read; a private repository is
"not found" to anyone else, exactly as on the API.

- :meth:`BrowseService.home`: recently updated and most pulled repositories, counts.
- :meth:`BrowseService.search`: ``registry.search`` plus the filter values (``Facets``).
- :meth:`BrowseService.repository`: one repository, a page of its tags with sizes, pusher, compat.
- :meth:`BrowseService.layer`: one layer's chain, dependents, files, compat, annotations and
  raw documents (``registry.layerview``).

Errors: ``HubError`` (``NAME_INVALID``, ``NAME_UNKNOWN``, ``MANIFEST_UNKNOWN``, ``DIGEST_INVALID``,
``INVALID_REQUEST``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import AuditEvent
from hub_server.auth.scopes import Principal
from hub_server.db.models import Manifest, Repository, Tag
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.policy import EffectivePolicy, effective_policy
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.read.layerview import LayerView, layer_view
from hub_server.registry.read.search import (
    Facets,
    RepoCard,
    SearchQuery,
    SearchResults,
    facets,
    search_repositories,
    visible,
)

__all__ = ["BrowseService", "Home", "RepositoryView", "TagRow"]

HOME_LIST = 6
#: Seconds the search page's filter values are reused, and how many scope sets are remembered.
FACETS_MAX_AGE = 30.0
FACETS_CACHE_SIZE = 256
TAGS_PER_PAGE = 25


@dataclass(frozen=True)
class Home:
    recently_updated: list[RepoCard]
    most_pulled: list[RepoCard]
    repositories: int
    tags: int


@dataclass(frozen=True)
class TagRow:
    """One tag as the repository page lists it."""

    name: str
    digest: str
    pushed: datetime
    pusher: str | None
    logical_size: int
    stored_size: int
    shared_with_parent: int
    compat: dict[str, Any]
    has_parent: bool


@dataclass(frozen=True)
class RepositoryView:
    namespace: str
    name: str
    public: bool
    description: str
    created: datetime
    updated: datetime
    pull_count: int
    tags: list[TagRow]
    tag_total: int
    page: int
    per_page: int
    policy: EffectivePolicy | None = None
    """Immutable tags and retention (``registry/content/policy.py``)."""
    readme: str = ""
    """The long description (Markdown), shown under the tags."""

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pages(self) -> int:
        return max(1, -(-self.tag_total // self.per_page))


class BrowseService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx
        self._facets: dict[tuple[bool, tuple[str, ...]], tuple[float, Facets]] = {}

    async def home(self, principal: Principal) -> Home:
        """The front page's lists and counts (readable repositories only)."""
        async with self.ctx.sessions() as session:
            recent = await search_repositories(session, principal, SearchQuery(sort="updated", per_page=HOME_LIST))
            pulled = await search_repositories(session, principal, SearchQuery(sort="pulls", per_page=HOME_LIST))
            tags = (
                await session.exec(
                    select(func.count())
                    .select_from(Tag)
                    .join(Repository, col(Repository.id) == col(Tag.repository_id))
                    .where(visible(principal))
                )
            ).one()
        return Home(recent.items, [r for r in pulled.items if r.pull_count > 0], recent.total, tags)

    async def search(self, principal: Principal, query: SearchQuery) -> tuple[SearchResults, Facets]:
        """A page of search results and the values the filters offer. Raises HubError(INVALID_REQUEST).

        The filter values scan every tagged layer's compatibility metadata, so they are reused for
        :data:`FACETS_MAX_AGE` seconds per set of scopes (a new VMM shows up in the list that late).
        """
        async with self.ctx.sessions() as session:
            results = await search_repositories(session, principal, query)
            key = (principal.is_admin, tuple(sorted(str(s) for s in principal.scopes)))
            cached = self._facets.get(key)
            now = time.monotonic()
            if cached is None or cached[0] < now:
                if len(self._facets) >= FACETS_CACHE_SIZE:
                    self._facets.clear()
                cached = (now + FACETS_MAX_AGE, await facets(session, principal))
                self._facets[key] = cached
        return results, cached[1]

    async def namespace(self, principal: Principal, namespace: str, page: int = 1) -> SearchResults:
        """A page of the readable repositories in ``namespace``; NAME_UNKNOWN when there is none."""
        async with self.ctx.sessions() as session:
            results = await search_repositories(
                session, principal, SearchQuery(namespace=namespace, sort="name", page=page)
            )
        if results.total == 0:
            raise HubError(ErrorCode.NAME_UNKNOWN, f"namespace {namespace[:64]} not found", {"name": namespace[:64]})
        return results

    async def repository(self, scope: RepositoryScope, page: int = 1) -> RepositoryView:
        """The repository of ``scope`` (``pull``) and a page of its tags, most recently pushed first."""
        if page < 1:
            raise HubError(ErrorCode.INVALID_REQUEST, "page must be 1 or more", {"field": "page"})
        repo = scope.row
        async with self.ctx.sessions() as session:
            total = (
                await session.exec(select(func.count()).select_from(Tag).where(col(Tag.repository_id) == repo.id))
            ).one()
            rows = (
                await session.exec(
                    select(Tag, Manifest)
                    .join(Manifest, col(Manifest.digest) == col(Tag.manifest_digest))
                    .where(col(Tag.repository_id) == repo.id)
                    .order_by(col(Tag.updated_at).desc(), col(Tag.name))
                    .limit(TAGS_PER_PAGE)
                    .offset((page - 1) * TAGS_PER_PAGE)
                )
            ).all()
            pushers = await _pushers(session, repo.full_name, [(t.name, t.manifest_digest) for t, _ in rows])
            policy = await effective_policy(session, self.ctx, repo.id)  # type: ignore[arg-type]
        tags = [
            TagRow(
                t.name,
                t.manifest_digest,
                t.updated_at,
                pushers.get(t.name),
                m.logical_size,
                m.stored_size,
                m.shared_with_parent,
                dict(m.compat),
                m.parent_digest is not None,
            )
            for t, m in rows
        ]
        return RepositoryView(
            repo.namespace,
            repo.name,
            repo.public,
            repo.description,
            repo.created_at,
            repo.updated_at,
            repo.pull_count,
            tags,
            total,
            page,
            TAGS_PER_PAGE,
            policy,
            repo.readme,
        )

    async def layer(self, scope: RepositoryScope, ref: str) -> LayerView:
        """The layer page of the repository of ``scope`` (``pull``) at ``ref`` (tag or digest)."""
        return await layer_view(self.ctx, scope, ref)


async def _pushers(session: AsyncSession, repository: str, tags: list[tuple[str, str]]) -> dict[str, str]:
    """Who last pointed each tag at its current digest, from the audit log's ``tag`` events."""
    if not tags:
        return {}
    current = dict(tags)
    rows = (
        await session.exec(
            select(AuditEvent.reference, AuditEvent.digest, AuditEvent.actor)
            .where(
                col(AuditEvent.repository) == repository,
                col(AuditEvent.action) == "tag",
                col(AuditEvent.reference).in_(list(current)),
            )
            .order_by(col(AuditEvent.id))
        )
    ).all()
    return {ref: actor for ref, digest, actor in rows if ref is not None and current.get(ref) == digest}
