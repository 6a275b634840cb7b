"""Retention: which tags a repository's policy expires, and expiring them (run by GC).

A repository's retention policy (``registry/content/policy.py``) looks only at the tags matching its
pattern: it keeps the ``keep_last`` most recently set ones (by when the tag was last set; ties by
name) and/or those set within ``keep_days`` days, and expires the rest. Expiring removes the
**tag only**: what it pointed at then becomes unreferenced unless another tag (in any
repository) reaches it, and GC sweeps it by reachability after the grace period — so an ancestor
a kept tag chains on, a manifest a kept index lists, and the blobs of kept manifests all stay,
whatever the policy says. A tag moved or deleted between planning and expiring is left alone
(the delete is conditional on the digest planned).

Every expired tag is recorded in the audit log as a ``delete`` (a tag-only removal; webhooks
deliver it as a ``delete`` event with ``manifestRemoved: false``).

Errors: SQLAlchemy errors pass through.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_
from sqlmodel import col, select

from hub_server.db.models import Repository, Tag
from hub_server.db.models_policy import RepositoryPolicy
from hub_server.registry.content.policy import Retention, combine
from hub_server.registry.core.context import RegistryContext

__all__ = ["ExpiredTag", "expire_tags", "plan_retention", "select_expired"]


@dataclass(frozen=True)
class ExpiredTag:
    """A tag a retention policy removes, and why."""

    repository_id: int
    repository: str
    tag: str
    digest: str
    updated: datetime
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "tag": self.tag,
            "digest": self.digest,
            "updated": self.updated.isoformat(),
            "reason": self.reason,
        }


def select_expired(
    retention: Retention, tags: list[tuple[str, str, datetime]], now: datetime
) -> list[tuple[str, str, datetime, str]]:
    """The ``(name, digest, updated, reason)`` of ``tags`` (name, digest, updated) that ``retention`` expires."""
    matching = sorted((t for t in tags if retention.pattern.matches(t[0])), key=lambda t: (-t[2].timestamp(), t[0]))
    kept: set[str] = set()
    if retention.keep_last is not None:
        kept.update(name for name, _, _ in matching[: retention.keep_last])
    cutoff = None if retention.keep_days is None else now - timedelta(days=retention.keep_days)
    if cutoff is not None:
        kept.update(name for name, _, updated in matching if updated >= cutoff)
    reasons = []
    if retention.keep_last is not None:
        reasons.append(f"not among the last {retention.keep_last}")
    if retention.keep_days is not None:
        reasons.append(f"set over {retention.keep_days} day(s) ago")
    reason = " and ".join(reasons) + f" of the tags matching {retention.pattern}"
    return [(name, digest, updated, reason) for name, digest, updated in matching if name not in kept]


async def plan_retention(ctx: RegistryContext, now: datetime) -> list[ExpiredTag]:
    """Every tag some repository's retention policy expires as of ``now``, by repository then tag."""
    out: list[ExpiredTag] = []
    async with ctx.sessions() as session:
        rows = (
            await session.exec(
                select(RepositoryPolicy, Repository)
                .join(Repository, col(Repository.id) == RepositoryPolicy.repository_id)
                .where(
                    or_(
                        col(RepositoryPolicy.retention_keep_last).is_not(None),
                        col(RepositoryPolicy.retention_keep_days).is_not(None),
                    )
                )
                .order_by(col(Repository.namespace), col(Repository.name))
            )
        ).all()
        for policy_row, repo in rows:
            retention = combine(policy_row, ctx).retention
            if retention is None:  # pragma: no cover - the query selects rows with a rule
                continue
            tags = (
                await session.exec(
                    select(Tag.name, Tag.manifest_digest, Tag.updated_at).where(Tag.repository_id == repo.id)
                )
            ).all()
            for name, digest, updated, reason in select_expired(retention, list(tags), now):
                out.append(ExpiredTag(repo.id, repo.full_name, name, digest, updated, reason))  # type: ignore[arg-type]
    return sorted(out, key=lambda e: (e.repository, e.tag))


async def expire_tags(ctx: RegistryContext, expired: list[ExpiredTag], actor: str) -> list[ExpiredTag]:
    """Delete the planned tags still pointing where planned; audit each as a ``delete``; return those deleted."""
    done: list[ExpiredTag] = []
    async with ctx.sessions() as session:
        for item in expired:
            result = await session.exec(
                delete(Tag).where(
                    col(Tag.repository_id) == item.repository_id,
                    col(Tag.name) == item.tag,
                    col(Tag.manifest_digest) == item.digest,
                )
            )
            if result.rowcount == 1:
                done.append(item)
        await session.commit()
    for item in done:
        await ctx.audit.record(
            actor,
            "delete",
            repository=item.repository,
            reference=item.tag,
            detail={"tagDigest": item.digest, "retention": item.reason},
        )
    return done
