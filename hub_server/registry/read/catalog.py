"""The catalog: namespaces, repositories (search, detail) and repository settings.

Everything here is filtered to what the caller may see: public repositories, and private ones
the caller may pull. Listings are in lexical order and paginated with ``n``/``last``.

Errors: ``HubError`` (``NAME_INVALID``, ``NAME_UNKNOWN``, ``INVALID_REQUEST``),
``Unauthorized``/``Forbidden`` for updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Manifest, Repository, Tag
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.policy import EffectivePolicy, PolicyChange, apply_policy_change, effective_policy
from hub_server.registry.content.tags import Page, page_size
from hub_server.registry.core.access import RepositoryScope, can_read
from hub_server.registry.core.context import RegistryContext

__all__ = ["CatalogService", "RepositoryDetail", "RepositoryPage", "RepositorySummary", "TagDetail"]

MAX_DESCRIPTION = 4096
MAX_README = 65_536


@dataclass(frozen=True)
class RepositorySummary:
    name: str
    public: bool
    description: str
    tags: list[str]
    updated: datetime


@dataclass(frozen=True)
class RepositoryPage:
    items: list[RepositorySummary]
    next_last: str | None


@dataclass(frozen=True)
class TagDetail:
    name: str
    digest: str
    media_type: str
    size: int
    logical_size: int
    stored_size: int
    created: datetime
    updated: datetime


@dataclass(frozen=True)
class RepositoryDetail:
    name: str
    public: bool
    description: str
    created: datetime
    updated: datetime
    tags: list[TagDetail]
    policy: EffectivePolicy | None = None
    """Immutable tags and retention (``registry/content/policy.py``)."""
    pull_count: int = 0
    readme: str = ""


class CatalogService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def namespaces(self, principal: Principal, n: int | None = None, last: str | None = None) -> Page:
        """Namespaces holding at least one repository the caller can see."""
        size = page_size(n)
        async with self.ctx.sessions() as session:
            repos = await _visible(session, principal)
        names = sorted({r.namespace for r in repos if not last or r.namespace > last})
        more = len(names) > size
        return Page(names[:size], names[size - 1] if more else None)

    async def repositories(
        self,
        principal: Principal,
        *,
        namespace: str | None = None,
        q: str | None = None,
        n: int | None = None,
        last: str | None = None,
    ) -> RepositoryPage:
        """Repositories the caller can see, optionally in one namespace and matching ``q``
        (a case-insensitive substring of the name or the description)."""
        size = page_size(n)
        needle = (q or "").strip().lower()
        async with self.ctx.sessions() as session:
            repos = [
                r
                for r in await _visible(session, principal, namespace)
                if (not last or r.full_name > last)
                and (not needle or needle in r.full_name.lower() or needle in r.description.lower())
            ]
            more = len(repos) > size
            repos = repos[:size]
            tags = await _tag_names(session, [r.id for r in repos])  # type: ignore[misc]
        items = [
            RepositorySummary(r.full_name, r.public, r.description, tags.get(r.id, []), r.updated_at)  # type: ignore[arg-type]
            for r in repos
        ]
        return RepositoryPage(items, items[-1].name if more else None)

    async def repository(self, scope: RepositoryScope) -> RepositoryDetail:
        """The repository of ``scope`` (``pull``) with its tags (digest, sizes, times)."""
        async with self.ctx.sessions() as session:
            return await _detail(session, scope.row, self.ctx)

    async def update(
        self,
        scope: RepositoryScope,
        *,
        public: bool | None = None,
        description: str | None = None,
        readme: str | None = None,
        policy: PolicyChange | None = None,
        remote: str | None = None,
    ) -> RepositoryDetail:
        """Change visibility, description and/or README of the repository of ``scope`` (a ``push`` scope: push
        or admin there), and the tag policies (needs admin: ``registry/content/policy.py``). All or nothing: a
        bad field changes nothing.

        Raises: HubError(NAME_UNKNOWN, INVALID_REQUEST), Forbidden/Unauthorized (policies without admin).
        """
        for field, value, limit in (("description", description, MAX_DESCRIPTION), ("readme", readme, MAX_README)):
            if value is not None and len(value) > limit:
                raise HubError(
                    ErrorCode.INVALID_REQUEST,
                    f"{field} is over {limit:,} characters",
                    {"field": field, "limit": limit},
                )
        async with self.ctx.sessions() as session:
            repo = await scope.row_in(session)
            changes: dict = {}
            policy_changes: dict = {}
            if policy is not None and not policy.empty:
                scope.require("admin")
                policy_changes = await apply_policy_change(session, self.ctx, repo, policy)
            if public is not None and public != repo.public:
                repo.public = changes["public"] = public
            if description is not None and description != repo.description:
                repo.description = changes["description"] = description
            if readme is not None and readme != repo.readme:
                repo.readme = readme
                changes["readme"] = f"{len(readme)} characters"  # the audit log keeps its size, not the text
            if changes or policy_changes:
                repo.updated_at = self.ctx.clock()
                session.add(repo)
            await session.commit()
            if changes or policy_changes:
                self.ctx.cache.forget_repository(
                    scope.namespace, scope.name
                )  # made private: no cached read may outlive it
            detail = await _detail(session, repo, self.ctx)
        if policy_changes:
            await self.ctx.audit.record(
                scope.principal.actor, "policy", repository=repo.full_name, remote=remote, detail=policy_changes
            )
        if changes:
            action = "visibility" if "public" in changes else "update"
            await self.ctx.audit.record(
                scope.principal.actor, action, repository=repo.full_name, remote=remote, detail=changes
            )
        return detail


async def _visible(session: AsyncSession, principal: Principal, namespace: str | None = None) -> list[Repository]:
    query = select(Repository).order_by(col(Repository.namespace), col(Repository.name))
    if namespace:
        query = query.where(Repository.namespace == namespace)
    return [r for r in (await session.exec(query)).all() if can_read(principal, r)]


async def _tag_names(session: AsyncSession, repo_ids: list[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    if repo_ids:
        rows = await session.exec(
            select(Tag.repository_id, Tag.name).where(col(Tag.repository_id).in_(repo_ids)).order_by(col(Tag.name))
        )
        for repo_id, tag in rows.all():
            out.setdefault(repo_id, []).append(tag)
    return out


async def _detail(session: AsyncSession, repo: Repository, ctx: RegistryContext) -> RepositoryDetail:
    rows = await session.exec(
        select(Tag, Manifest)
        .join(Manifest, Manifest.digest == Tag.manifest_digest)  # type: ignore[arg-type]
        .where(Tag.repository_id == repo.id)
        .order_by(col(Tag.name))
    )
    tags = [
        TagDetail(t.name, m.digest, m.media_type, m.size, m.logical_size, m.stored_size, m.created_at, t.updated_at)
        for t, m in rows.all()
    ]
    policy = await effective_policy(session, ctx, repo.id)  # type: ignore[arg-type]
    return RepositoryDetail(
        repo.full_name,
        repo.public,
        repo.description,
        repo.created_at,
        repo.updated_at,
        tags,
        policy,
        pull_count=repo.pull_count,
        readme=repo.readme,
    )
