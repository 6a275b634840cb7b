"""Who may see and change which repository (docs/http-api.md, "Authentication and authorization").

Reads: public repositories for everyone, private ones for principals with ``pull`` (implied by
``push``/``delete``/``admin``). A repository the caller cannot read is reported exactly like a
missing one, so existence never leaks: 401 with a challenge naming the pull scope to an
anonymous caller (so OCI clients authenticate), 403 with an ``insufficient_scope`` challenge to
a registry token whose API token could read it, 404 ``NAME_UNKNOWN`` to any other token. Writes check the scope before
anything else (``Principal.require``: 401 anonymous, 403 token), which also says nothing
about existence.

Errors: ``HubError(NAME_UNKNOWN / NAME_INVALID)``, ``auth.errors.Unauthorized``/``Forbidden``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.errors import Unauthorized
from hub_server.auth.scopes import Action, Principal, repository_scope
from hub_server.db.models import Repository, RepositoryBlob, RepositoryManifest, utcnow
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.names import check_repository
from hub_server.registry.core.sql import batched, insert_ignore

__all__ = [
    "can_read",
    "check_readable",
    "ensure_repository",
    "find_repository",
    "readable_linking",
    "readable_repository",
    "require",
    "unknown_repository",
    "writable_repository",
]


class _Readable(Protocol):
    public: bool

    @property
    def full_name(self) -> str: ...


_R = TypeVar("_R", bound=_Readable)


def can_read(principal: Principal, repo: _Readable) -> bool:
    return repo.public or principal.can("pull", repo.full_name)


def require(principal: Principal, action: Action, repository: str) -> None:
    """Raise Unauthorized (anonymous) or Forbidden (token) unless ``principal`` may ``action``."""
    principal.require(action, repository)


def unknown_repository(full_name: str) -> HubError:
    return HubError(ErrorCode.NAME_UNKNOWN, f"repository {full_name} not found", {"name": full_name})


async def find_repository(session: AsyncSession, namespace: str, name: str) -> Repository | None:
    result = await session.exec(select(Repository).where(Repository.namespace == namespace, Repository.name == name))
    return result.first()


async def readable_repository(session: AsyncSession, principal: Principal, namespace: str, name: str) -> Repository:
    """The repository if it exists and ``principal`` may read it.

    Raises, whether the repository exists or not: Unauthorized (with the pull scope to ask for)
    for an anonymous caller; Forbidden ``insufficient_scope`` for a registry token without pull
    there whose API token has it; else HubError(NAME_INVALID / NAME_UNKNOWN).
    """
    full = check_repository(namespace, name)
    return check_readable(principal, full, await find_repository(session, namespace, name))


def check_readable(principal: Principal, full: str, repo: _R | None) -> _R:
    """``repo`` (the repository ``full``, or None when it does not exist) if ``principal`` may read it.

    Raises: as :func:`readable_repository`.
    """
    if repo is None or not can_read(principal, repo):
        if principal.is_anonymous:  # the client should authenticate; says nothing about existence
            raise Unauthorized(f"authentication required to read {full}", "required", repository_scope(full, "pull"))
        if not principal.can("pull", full) and principal.could("pull", full):
            # a registry token whose API token may read it: ask for that scope
            raise principal.insufficient_scope("pull", full)
        raise unknown_repository(full)
    return repo


async def writable_repository(
    session: AsyncSession,
    principal: Principal,
    namespace: str,
    name: str,
    *,
    action: Action = "push",
    create: bool = False,
    public: bool = False,
) -> Repository:
    """The repository ``principal`` may ``action`` on; created (private unless ``public``) when
    ``create`` and missing. Commits nothing itself except a creation.

    Raises: HubError(NAME_INVALID / NAME_UNKNOWN), Unauthorized, Forbidden.
    """
    full = check_repository(namespace, name)
    require(principal, action, full)
    repo = await find_repository(session, namespace, name)
    if repo is None:
        if not create:
            raise unknown_repository(full)
        repo = await ensure_repository(session, namespace, name, public=public)
        await session.commit()
    return repo


async def ensure_repository(session: AsyncSession, namespace: str, name: str, *, public: bool = False) -> Repository:
    """Find or create (private unless ``public``) a repository, inside the caller's transaction."""
    now = utcnow()
    # Insert-or-ignore: a concurrent first push may win the race; either way it exists after.
    await insert_ignore(
        session,
        Repository,
        [
            {
                "namespace": namespace,
                "name": name,
                "public": public,
                "description": "",
                "created_at": now,
                "updated_at": now,
            }
        ],
    )
    repo = await find_repository(session, namespace, name)
    assert repo is not None
    return repo


async def readable_linking(
    session: AsyncSession, principal: Principal, *, blobs: Iterable[str] = (), manifests: Iterable[str] = ()
) -> dict[str, list[Repository]]:
    """For each blob / manifest digest, the repositories linking it that ``principal`` may read."""
    out: dict[str, list[Repository]] = {}
    for model, column, digests in (
        (RepositoryBlob, RepositoryBlob.blob_digest, list(dict.fromkeys(blobs))),
        (RepositoryManifest, RepositoryManifest.manifest_digest, list(dict.fromkeys(manifests))),
    ):
        for batch in batched(digests):
            rows = await session.exec(
                select(column, Repository)
                .join(Repository, Repository.id == model.repository_id)  # type: ignore[arg-type]
                .where(col(column).in_(batch))
                .order_by(col(Repository.namespace), col(Repository.name))
            )
            for digest, repo in rows.all():
                if can_read(principal, repo):
                    out.setdefault(digest, []).append(repo)
    return out
