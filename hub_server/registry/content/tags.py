"""Tags: resolving a ``{ref}`` in a repository, moving a tag (compare-and-swap), listing names.

Moving a tag is one conditional statement, so replicas on one database agree on a winner:
with an expectation (``expected`` a digest, or :data:`ABSENT`) the tag moves only if it still
points there (``UPDATE … WHERE manifest_digest = expected`` / ``INSERT … ON CONFLICT DO
NOTHING``); without one (:data:`ANY`) it is an upsert, last writer wins.

An immutable tag (``registry/content/policy.py``) is only ever inserted (``ON CONFLICT DO NOTHING``),
whatever the expectation: of two concurrent pushes exactly one sets it, and the other — like any
later push of another digest — gets ``TAG_IMMUTABLE``; pushing the digest it names is a no-op.

Errors: ``HubError(MANIFEST_UNKNOWN)``, ``HubError(NAME_UNKNOWN / NAME_INVALID)``,
``HubError(TAG_CONFLICT)``, ``HubError(TAG_IMMUTABLE)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import Repository, RepositoryManifest, Tag
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import Reference

__all__ = ["ABSENT", "ANY", "Page", "TagService", "move_tag", "resolve_reference", "tags_by_digest"]

ANY: Final = "*any*"
"""No expectation: the tag moves whatever it pointed at."""
ABSENT: Final = "*absent*"
"""The tag must not exist yet (``If-None-Match: *``)."""

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
    raise HubError(
        ErrorCode.MANIFEST_UNKNOWN,
        f"{repo.full_name}:{reference} is unknown",
        {"name": repo.full_name, "reference": str(reference)},
    )


async def move_tag(
    session: AsyncSession,
    repo_id: int,
    name: str,
    digest: str,
    now: datetime,
    expected: str = ANY,
    *,
    immutable: bool = False,
    repository: str = "",
) -> None:
    """Point tag ``name`` at ``digest`` if it still points at ``expected`` (a digest, ABSENT or ANY).

    A tag already at ``digest`` satisfies any expectation (the same push, retried). An
    ``immutable`` tag is only ever created, never moved.
    Raises: HubError(TAG_CONFLICT) naming what the tag points at now; HubError(TAG_IMMUTABLE)
    when an immutable tag points at another digest.
    """
    if immutable and expected not in (ANY, ABSENT):
        actual = await _tag_digest(session, repo_id, name)
        if actual == digest:
            return
        if actual is not None:
            raise _immutable(repository, name, actual, digest)
    if immutable:
        expected = ABSENT
    table = Tag.__table__  # type: ignore[attr-defined]
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table).values(
        repository_id=repo_id, name=name, manifest_digest=digest, updated_at=now
    )
    if expected == ANY:
        await session.exec(
            insert.on_conflict_do_update(
                index_elements=["repository_id", "name"], set_={"manifest_digest": digest, "updated_at": now}
            )
        )
        return
    if expected == ABSENT:
        moved = (await session.exec(insert.on_conflict_do_nothing())).rowcount
    else:
        moved = (
            await session.exec(
                update(Tag)
                .where(
                    col(Tag.repository_id) == repo_id,
                    col(Tag.name) == name,
                    col(Tag.manifest_digest) == expected,
                )
                .values(manifest_digest=digest, updated_at=now)
            )
        ).rowcount
    if moved == 1:
        return
    actual = await _tag_digest(session, repo_id, name)
    if actual == digest:
        return
    if immutable and actual is not None:
        raise _immutable(repository, name, actual, digest)
    raise HubError(
        ErrorCode.TAG_CONFLICT,
        f"tag {name!r} points at {actual or 'nothing'}, not {'nothing' if expected == ABSENT else expected} "
        "as this push expected: another push moved it",
        {"tag": name, "expected": None if expected == ABSENT else expected, "actual": actual},
    )


async def _tag_digest(session: AsyncSession, repo_id: int, name: str) -> str | None:
    return (
        await session.exec(select(Tag.manifest_digest).where(Tag.repository_id == repo_id, Tag.name == name))
    ).first()


def _immutable(repository: str, name: str, actual: str, digest: str) -> HubError:
    where = f"{repository}:{name}" if repository else repr(name)
    return HubError(
        ErrorCode.TAG_IMMUTABLE,
        f"tag {where} is immutable and already points at {actual}; it cannot be moved to {digest}: "
        "push under a new tag",
        {"tag": name, "actual": actual, "digest": digest},
    )


async def tags_by_digest(session: AsyncSession, repo_id: int, digests: list[str]) -> dict[str, list[str]]:
    """Tag names in one repository for each of ``digests``."""
    out: dict[str, list[str]] = {}
    if not digests:
        return out
    rows = await session.exec(
        select(Tag).where(Tag.repository_id == repo_id, col(Tag.manifest_digest).in_(digests)).order_by(col(Tag.name))
    )
    for tag in rows.all():
        out.setdefault(tag.manifest_digest, []).append(tag.name)
    return out


class TagService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def list(self, scope: RepositoryScope, n: int | None = None, last: str | None = None) -> Page:
        """Tag names of the repository of ``scope`` (``pull``) in lexical order, after ``last`` (none at all
        for ``n=0``)."""
        size = page_size(n)
        if n == 0:
            return Page([], None)
        async with self.ctx.sessions() as session:
            query = select(Tag.name).where(Tag.repository_id == scope.id).order_by(col(Tag.name)).limit(size + 1)
            if last:
                query = query.where(col(Tag.name) > last)
            names = list((await session.exec(query)).all())
        more = len(names) > size
        names = names[:size]
        return Page(names, names[-1] if more else None)
