"""Deleting a snapshot from a repository (docs/http-api.md, "Delete").

By digest: the manifest's link to the repository and every tag there pointing at it. By tag:
that tag, and, for a forkd snapshot, the manifest too when no other tag in the repository
points at it (a generic OCI manifest keeps its link: only the tag goes). A manifest
that other (still linked) manifests chain on is refused with ``HAS_DEPENDENTS`` — the detail
lists the dependents the caller can see and counts the rest — unless ``cascade`` (remove the
dependents first, leaves first, needing delete scope wherever they are) or ``force`` (remove
anyway; GC keeps a parent alive while a child is reachable). Both at once: ``UNSUPPORTED``.

Only links and tags are removed here; bytes and unreferenced rows go in garbage collection.

Who may delete is the ``delete`` access of ``core/access.py`` (resolved before the service runs).

Immutable tags (``content/policy.py``) may be deleted with delete scope (``immutable="allow"``, the API's
rule). The operator CLI asks for more care: ``"refuse"`` refuses an immutable tag with ``TAG_IMMUTABLE``,
``"override"`` deletes it and its audit event says ``immutableOverride``.

Errors: ``HubError`` (``UNSUPPORTED``, ``HAS_DEPENDENTS``, ``DENIED``, ``NAME_INVALID`` (a bad tag),
``MANIFEST_UNKNOWN``, ``TAG_IMMUTABLE`` (``immutable="refuse"``)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import delete
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Manifest, Repository, RepositoryManifest, Tag
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.policy import tag_is_immutable
from hub_server.registry.content.tags import resolve_reference
from hub_server.registry.core.access import RepositoryScope, can_read
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import parse_reference
from hub_server.registry.core.sql import batched
from hub_server.registry.read.lineage import descendants
from manifest import mediatypes as mt

__all__ = ["DeleteResult", "DeleteService", "ImmutableTags", "Removal"]

ImmutableTags = Literal["allow", "refuse", "override"]
"""What deleting an immutable tag does: see the module docstring."""


@dataclass(frozen=True)
class Removal:
    repository: str
    digest: str | None
    """None when only a tag was removed and the manifest stays."""
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DeleteResult:
    removed: list[Removal]


@dataclass(frozen=True)
class _Holder:
    repo: Repository
    digest: str
    tags: list[str]


class DeleteService:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def delete(
        self,
        scope: RepositoryScope,
        ref: str,
        *,
        cascade: bool = False,
        force: bool = False,
        remote: str | None = None,
        immutable: ImmutableTags = "allow",
    ) -> DeleteResult:
        """Delete what ``ref`` names from the repository of ``scope`` (a ``delete`` scope; see the module docstring)."""
        if cascade and force:
            raise HubError(
                ErrorCode.UNSUPPORTED, "cascade and force cannot be combined", {"cascade": True, "force": True}
            )
        principal, full = scope.principal, scope.full_name
        reference = parse_reference(ref)
        removed: list[Removal] = []
        async with self.ctx.sessions() as session:
            repo = await scope.row_in(session)
            digest = await resolve_reference(session, repo, reference)
            overridden = (
                reference.tag is not None
                and immutable != "allow"
                and await tag_is_immutable(session, self.ctx, repo.id, reference.tag)  # type: ignore[arg-type]
            )
            if overridden and immutable == "refuse":
                raise HubError(
                    ErrorCode.TAG_IMMUTABLE,
                    f"tag {full}:{reference.tag} is immutable; deleting it needs an explicit override",
                    {"repository": full, "tag": reference.tag, "digest": digest},
                )
            tags = await _tags_on(session, repo, digest)
            if reference.tag is not None and (len(tags) > 1 or not await _is_forkd(session, digest)):
                # Only the tag goes: another tag holds the manifest, or it is generic OCI content
                # (deleting a tag is not deleting the manifest there: distribution-spec "Deleting tags").
                await session.exec(delete(Tag).where(col(Tag.repository_id) == repo.id, col(Tag.name) == reference.tag))
                removed.append(Removal(full, None, [reference.tag]))
            else:
                holders = await _dependent_holders(session, digest)
                if holders and cascade:
                    _require_delete_on_all(principal, holders)
                    for holder in holders:  # leaves first
                        await _unlink(session, holder.repo, holder.digest)
                        removed.append(Removal(holder.repo.full_name, holder.digest, holder.tags))
                elif holders and not force:
                    raise _has_dependents(principal, digest, holders)
                await _unlink(session, repo, digest)
                removed.append(Removal(full, digest, tags))
            repo.updated_at = self.ctx.clock()
            session.add(repo)
            await session.commit()
        for r in removed:  # tags and links gone, here and (cascade) in other repositories
            self.ctx.cache.forget_repository(*r.repository.split("/", 1))
        for r in removed:
            await self.ctx.audit.record(
                principal.actor,
                "delete",
                repository=r.repository,
                digest=r.digest,
                reference=",".join(r.tags) or None,
                remote=remote,
                detail={
                    "cascade": cascade,
                    "force": force,
                    **({"immutableOverride": True} if overridden else {}),
                    # only a tag went: the manifest it named stays
                    **({"tagDigest": digest} if r.digest is None else {}),
                },
            )
        return DeleteResult(removed)


async def _is_forkd(session: AsyncSession, digest: str) -> bool:
    row = await session.get(Manifest, digest)
    return row is not None and row.artifact_type in (mt.LAYER_ARTIFACT, mt.CHAIN_ARTIFACT)


async def _tags_on(session: AsyncSession, repo: Repository, digest: str) -> list[str]:
    rows = await session.exec(
        select(Tag.name).where(Tag.repository_id == repo.id, Tag.manifest_digest == digest).order_by(col(Tag.name))
    )
    return list(rows.all())


async def _unlink(session: AsyncSession, repo: Repository, digest: str) -> None:
    await session.exec(delete(Tag).where(col(Tag.repository_id) == repo.id, col(Tag.manifest_digest) == digest))
    await session.exec(
        delete(RepositoryManifest).where(
            col(RepositoryManifest.repository_id) == repo.id, col(RepositoryManifest.manifest_digest) == digest
        )
    )


async def _dependent_holders(session: AsyncSession, digest: str) -> list[_Holder]:
    """Every (repository, manifest) link of a manifest whose chain includes ``digest``, leaves first."""
    order = await descendants(session, digest)
    rank = {d: i for i, d in enumerate(order)}
    holders: list[_Holder] = []
    for batch in batched(order):
        rows = await session.exec(
            select(RepositoryManifest.manifest_digest, Repository)
            .join(Repository, col(Repository.id) == col(RepositoryManifest.repository_id))
            .where(col(RepositoryManifest.manifest_digest).in_(batch))
        )
        for dep, repo in rows.all():
            holders.append(_Holder(repo, dep, await _tags_on(session, repo, dep)))
    holders.sort(key=lambda h: (-rank[h.digest], h.repo.namespace, h.repo.name))
    return holders


def _describe(principal: Principal, holders: list[_Holder]) -> tuple[list[dict[str, str | None]], int]:
    visible: list[dict[str, str | None]] = []
    hidden = 0
    for h in holders:
        if not can_read(principal, h.repo):
            hidden += 1
            continue
        visible.extend({"repository": h.repo.full_name, "tag": tag, "digest": h.digest} for tag in h.tags or [None])  # type: ignore[list-item]
    return visible, hidden


def _has_dependents(principal: Principal, digest: str, holders: list[_Holder]) -> HubError:
    visible, hidden = _describe(principal, holders)
    return HubError(
        ErrorCode.HAS_DEPENDENTS,
        f"{len(holders)} manifest link(s) chain on {digest}; delete them first, or use ?cascade=true or ?force=true",
        {"digest": digest, "dependents": visible, "others": hidden},
    )


def _require_delete_on_all(principal: Principal, holders: list[_Holder]) -> None:
    lacking = [h for h in holders if not principal.can("delete", h.repo.full_name)]
    if lacking:
        visible, hidden = _describe(principal, lacking)
        raise HubError(
            ErrorCode.DENIED,
            "cascade needs delete access to every dependent's repository",
            {"dependents": visible, "others": hidden},
        )
