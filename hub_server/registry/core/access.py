"""Who may see and change which repository (docs/http-api.md, "Authentication and authorization"),
decided once per request: :func:`resolve_scope` turns the caller and a ``namespace/name`` into a
:class:`RepositoryScope` for one kind of access, the one place those rules live (distribution's
``Namespace.Repository(ctx, name)``: services then take the scope, never ``(principal, namespace, name)``).

The access a request asks for (:data:`Access`):

- ``pull`` (read): public repositories for everyone, private ones for principals with ``pull``
  (implied by ``push``/``delete``/``admin``). A repository the caller cannot read is reported exactly
  like a missing one, so existence never leaks: 401 with a challenge naming the pull scope to an
  anonymous caller (so OCI clients authenticate), 403 with an ``insufficient_scope`` challenge to a
  registry token whose API token could read it, 404 ``NAME_UNKNOWN`` to any other token.
- ``push`` / ``delete`` (write): the scope is checked before anything else (``Principal.require``:
  401 anonymous, 403 token), which also says nothing about existence. A pushed repository may not
  exist yet (the first push creates it: :meth:`RepositoryScope.created`); a delete needs it to exist.
- ``negotiate`` (which frames the hub holds, before a push): ``push``, or ``pull`` on an existing
  repository; the refusal is the push one (it depends only on the caller's scopes).
- ``upload`` (read or cancel an upload session: ``GET``/``DELETE`` of its URL): ``push``, or ``pull`` on an
  existing repository, for the session's opener only (the upload service checks who opened it: clients
  reuse one pull token for every ``GET``, and a reader must not see or cancel someone else's upload);
  the refusal is the push one.
- ``discover`` (the referrers API): ``pull``, and a repository that does not exist yet reads as empty
  to a caller whose scopes let it read that name (a registry with the referrers API never answers 404
  there); anyone else is answered as for ``pull``.
- ``place`` (which fleet hosts hold a chain, docs/placement.md): ``node`` on an existing repository,
  or whatever ``pull`` allows, refused as ``pull`` is (a node never learns of a repository it cannot read).

Reads across repositories (dedup, lineage) stay per row: :func:`can_read`, :func:`readable_linking`.

Errors: ``HubError(NAME_UNKNOWN / NAME_INVALID)``, ``auth.errors.Unauthorized``/``Forbidden``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from sqlalchemy import func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.errors import Forbidden, Unauthorized
from hub_server.auth.scopes import Action, Principal, repository_scope
from hub_server.db.models import Repository, RepositoryBlob, RepositoryManifest, utcnow
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.names import check_repository
from hub_server.registry.core.readcache import RepositoryFacts
from hub_server.registry.core.sql import batched, insert_ignore

if TYPE_CHECKING:
    from hub_server.registry.core.context import RegistryContext

__all__ = [
    "Access",
    "RepositoryScope",
    "authorize",
    "can_read",
    "check_readable",
    "ensure_repository",
    "find_repository",
    "mount_source_scope",
    "readable_linking",
    "resolve_scope",
    "scope_of",
    "unknown_repository",
]

#: What a request does to its repository (the module docstring says who may).
Access = Literal["pull", "push", "delete", "negotiate", "upload", "discover", "place"]


class _Readable(Protocol):
    public: bool

    @property
    def full_name(self) -> str: ...


_R = TypeVar("_R", bound=_Readable)


def can_read(principal: Principal, repo: _Readable) -> bool:
    return repo.public or principal.can("pull", repo.full_name)


def unknown_repository(full_name: str) -> HubError:
    return HubError(ErrorCode.NAME_UNKNOWN, f"repository {full_name} not found", {"name": full_name})


async def find_repository(session: AsyncSession, namespace: str, name: str) -> Repository | None:
    result = await session.exec(select(Repository).where(Repository.namespace == namespace, Repository.name == name))
    return result.first()


def mount_source_scope(source: str | None) -> str | None:
    """The Docker token scope that reads a mount's source (``?mount=…&from=ns/repo``), for the challenge of
    a refused mount (as distribution names it): None when ``source`` is not a repository name."""
    if source is None:
        return None
    namespace, _, name = source.partition("/")
    try:
        return repository_scope(check_repository(namespace, name), "pull")
    except HubError:
        return None


def check_readable(principal: Principal, full: str, repo: _R | None) -> _R:
    """``repo`` (the repository ``full``, or None when it does not exist) if ``principal`` may read it.

    Raises: Unauthorized (with the pull scope to ask for) for an anonymous caller; Forbidden
    ``insufficient_scope`` for a registry token without pull there whose API token has it; else
    HubError(NAME_UNKNOWN).
    """
    if repo is None or not can_read(principal, repo):
        if principal.is_anonymous:  # the client should authenticate; says nothing about existence
            raise Unauthorized(f"authentication required to read {full}", "required", repository_scope(full, "pull"))
        if not principal.can("pull", full) and principal.could("pull", full):
            # a registry token whose API token may read it: ask for that scope
            raise principal.insufficient_scope("pull", full)
        raise unknown_repository(full)
    return repo


async def ensure_repository(
    session: AsyncSession, namespace: str, name: str, *, public: bool = False, limit: int | None = None
) -> Repository:
    """Find or create (private unless ``public``) a repository, inside the caller's transaction.

    Raises: HubError(QUOTA_EXCEEDED) when it does not exist and ``namespace`` already holds ``limit``
    repositories (docs/limits.md).
    """
    if limit is not None:
        existing = await find_repository(session, namespace, name)
        if existing is not None:
            return existing
        count = (
            await session.exec(select(func.count()).select_from(Repository).where(Repository.namespace == namespace))
        ).one()
        if count >= limit:
            raise HubError(
                ErrorCode.QUOTA_EXCEEDED,
                f"repositories per namespace: {count} of {limit} used in {namespace!r}; delete one first "
                "(FORKD_HUB_REPOSITORIES_PER_NAMESPACE)",
                {"quota": "repositories per namespace", "limit": limit, "used": int(count), "namespace": namespace},
            )
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


class RepositoryScope:
    """The caller and one repository, resolved and authorized for ``access`` once per request
    (:func:`resolve_scope`); what every repository service takes.

    ``repository`` is the row read when the request began: a ``Repository`` (or, for a manifest
    read served through the read cache, its :class:`RepositoryFacts`), or None when it does not
    exist (only a ``push`` or ``negotiate`` scope gets that far). ``epoch`` is the read cache's epoch
    before that read (a read that began before a write must not fill the cache).

    A plain class, not a dataclass: Litestar hands it to handlers as a dependency without looking inside.
    """

    __slots__ = ("access", "epoch", "name", "namespace", "principal", "repository")

    def __init__(
        self,
        principal: Principal,
        namespace: str,
        name: str,
        access: Access,
        repository: Repository | RepositoryFacts | None,
        epoch: int = 0,
    ) -> None:
        self.principal = principal
        self.namespace = namespace
        self.name = name
        self.access: Access = access
        self.repository = repository
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"RepositoryScope({self.principal.actor!r}, {self.full_name!r}, {self.access!r})"

    def with_repository(self, repository: Repository) -> RepositoryScope:
        """The same scope once its repository exists (a push created it)."""
        return RepositoryScope(self.principal, self.namespace, self.name, self.access, repository, self.epoch)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    def existing(self) -> Repository | RepositoryFacts:
        """The repository. Raises HubError(NAME_UNKNOWN) when it does not exist (a write to a missing one)."""
        if self.repository is None:
            raise unknown_repository(self.full_name)
        return self.repository

    @property
    def id(self) -> int:
        """The repository's id. Raises HubError(NAME_UNKNOWN) when it does not exist."""
        repo_id = self.existing().id
        assert repo_id is not None
        return repo_id

    @property
    def row(self) -> Repository:
        """The repository's database row (a scope resolved without the read cache). Raises as :meth:`existing`."""
        repo = self.existing()
        assert isinstance(repo, Repository), "a scope resolved through the read cache holds facts, not a row"
        return repo

    @property
    def found(self) -> Repository | None:
        """The repository's row, or None when it does not exist yet (a ``push`` or ``negotiate`` scope)."""
        return None if self.repository is None else self.row

    @property
    def facts(self) -> RepositoryFacts:
        """The read cache's facts (a scope resolved with ``cached=True``)."""
        assert isinstance(self.repository, RepositoryFacts), "resolve the scope with cached=True"
        return self.repository

    def require(self, action: Action) -> None:
        """A further action on this repository (changing its policies needs ``admin``). Raises Unauthorized/Forbidden."""
        self.principal.require(action, self.full_name)

    async def row_in(self, session: AsyncSession) -> Repository:
        """The repository's row in ``session`` (to change it there). Raises HubError(NAME_UNKNOWN)."""
        repo = await session.get(Repository, self.id)
        if repo is None:  # pragma: no cover - repositories are never deleted
            raise unknown_repository(self.full_name)
        return repo

    async def created(self, session: AsyncSession, *, public: bool = False, limit: int | None = None) -> Repository:
        """The repository in ``session``, created (private unless ``public``) if it does not exist yet,
        inside the caller's transaction (a ``push`` scope). Raises HubError(QUOTA_EXCEEDED) when its
        namespace already holds ``limit`` repositories."""
        assert self.access == "push"
        if isinstance(self.repository, Repository):
            return await self.row_in(session)
        return await ensure_repository(session, self.namespace, self.name, public=public, limit=limit)


async def resolve_scope(
    ctx: RegistryContext,
    principal: Principal,
    namespace: str,
    name: str,
    access: Access,
    *,
    cached: bool = False,
    also: str | None = None,
) -> RepositoryScope:
    """``namespace/name`` for ``principal`` and ``access``: names checked, the caller authorized (the
    module docstring's rules, all here), the repository read once. ``cached``: read it through the read
    cache (manifest GET/HEAD: the repository facts, kept for the cache's TTL). ``also``: a Docker token
    scope a refusal's challenge names besides this repository's (a mount's source, :func:`mount_source_scope`),
    so that the token the client asks for next does the whole request.

    Raises: HubError(NAME_INVALID); for ``pull``: Unauthorized / Forbidden / HubError(NAME_UNKNOWN),
    alike whether the repository exists or not; for ``push`` / ``delete``: Unauthorized / Forbidden
    before the repository is read, then HubError(NAME_UNKNOWN) for a ``delete`` of a missing one; for
    ``negotiate`` and ``upload``: the ``push`` refusal unless the caller may read an existing repository;
    for ``discover``: as ``pull``, but a missing repository is no refusal to a caller who may read its name.
    """
    full = check_repository(namespace, name)
    try:
        if access in ("push", "delete"):
            principal.require(access, full)  # before anything is read: says nothing about existence
        epoch = ctx.cache.epoch
        facts = ctx.cache.repository(namespace, name) if cached else None
        repo: Repository | RepositoryFacts | None = facts
        if facts is None:
            async with ctx.sessions() as session:
                repo = await find_repository(session, namespace, name)
        authorize(principal, full, repo, access)
    except (Unauthorized, Forbidden) as refusal:
        if also and refusal.scope:
            refusal.scope = f"{refusal.scope} {also}"
        raise
    if cached and facts is None and isinstance(repo, Repository):  # kept for the TTL, as read at ``epoch``
        assert repo.id is not None
        repo = ctx.cache.remember_repository(repo.id, namespace, name, repo.public, epoch)
    return RepositoryScope(principal, namespace, name, access, repo, epoch)


def authorize(principal: Principal, full: str, repo: _Readable | None, access: Access) -> None:
    """THE rules of the module docstring: whether ``principal`` may ``access`` ``repo`` (the repository
    ``full``, None when it does not exist). Raises: as :func:`resolve_scope`."""
    if access in ("push", "delete"):
        principal.require(access, full)
    if (
        access == "pull"
        or (access == "discover" and (repo is not None or not principal.can("pull", full)))
        or (access == "place" and (repo is None or not principal.can("node", full)))
    ):
        check_readable(principal, full, repo)
    elif access == "upload" and not principal.can("push", full):
        if principal.is_anonymous or repo is None or not can_read(principal, repo):
            principal.require("push", full)  # a reader goes on: the upload service lets only the opener in
    elif access == "delete" and repo is None:
        raise unknown_repository(full)
    elif access == "negotiate" and not principal.can("push", full) and (repo is None or not can_read(principal, repo)):
        # A pusher may ask before its repository exists; anyone else needs to read it. The refusal depends
        # only on the caller's scopes (401 anonymous, 403 token), never on whether the repository exists.
        principal.require("push", full)


def scope_of(principal: Principal, repo: Repository, access: Access) -> RepositoryScope:
    """A scope over a row already read (forkd's registry.json builds the packs of public repositories),
    authorized by :func:`authorize`. Raises: as :func:`resolve_scope`."""
    authorize(principal, repo.full_name, repo, access)
    return RepositoryScope(principal, repo.namespace, repo.name, access, repo)
