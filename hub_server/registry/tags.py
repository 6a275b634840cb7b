"""Tags: resolving a ``{ref}`` in a repository, and listing tag names (paginated).

Errors: ``HubError(MANIFEST_UNKNOWN)``, ``HubError(NAME_UNKNOWN / NAME_INVALID)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Repository, RepositoryManifest, Tag
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.access import readable_repository
from hub_server.registry.context import RegistryContext
from hub_server.registry.names import Reference

__all__ = ["Page", "TagService", "resolve_reference", "tags_by_digest"]

MAX_PAGE = 1000


@dataclass(frozen=True)
class Page:
    """One page of names; ``next_last`` is the ``last=`` value of the next page, or None."""

    items: list[str]
    next_last: str | None


def page_size(n: int | None) -> int:
    """Clamp a client's ``n=`` to 1 … MAX_PAGE (default MAX_PAGE)."""
    return MAX_PAGE if n is None else max(1, min(int(n), MAX_PAGE))


async def resolve_reference(session: AsyncSession, repo: Repository, reference: Reference) -> str:
    """The manifest digest ``reference`` names in ``repo``. Raises HubError(MANIFEST_UNKNOWN)."""
    if reference.tag is not None:
        tag = await session.get(Tag, (repo.id, reference.tag))
        if tag is not None:
            return tag.manifest_digest
    elif await session.get(RepositoryManifest, (repo.id, reference.digest)) is not None:
        return reference.digest  # type: ignore[return-value]
    raise HubError(ErrorCode.MANIFEST_UNKNOWN, f"{repo.full_name}:{reference} is unknown",
                   {"name": repo.full_name, "reference": str(reference)})


async def tags_by_digest(session: AsyncSession, repo_id: int, digests: list[str]) -> dict[str, list[str]]:
    """Tag names in one repository for each of ``digests``."""
    out: dict[str, list[str]] = {}
    if not digests:
        return out
    rows = await session.exec(select(Tag).where(Tag.repository_id == repo_id, col(Tag.manifest_digest).in_(digests))
                              .order_by(col(Tag.name)))
    for tag in rows.all():
        out.setdefault(tag.manifest_digest, []).append(tag.name)
    return out


class TagService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def list(self, principal: Principal, namespace: str, name: str, n: int | None = None,
                   last: str | None = None) -> Page:
        """Tag names of a readable repository in lexical order, after ``last``."""
        size = page_size(n)
        async with self.ctx.sessions() as session:
            repo = await readable_repository(session, principal, namespace, name)
            query = select(Tag.name).where(Tag.repository_id == repo.id).order_by(col(Tag.name)).limit(size + 1)
            if last:
                query = query.where(col(Tag.name) > last)
            names = list((await session.exec(query)).all())
        more = len(names) > size
        names = names[:size]
        return Page(names, names[-1] if more else None)
