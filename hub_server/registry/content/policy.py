"""Repository policies: immutable tags and retention, per repository over hub-wide defaults.

**Immutable tags.** With the policy on, a tag once set never moves to another digest: pushing it
to the digest it names is a no-op success, to any other digest ``HubError(TAG_IMMUTABLE)`` (409),
on the native API and the OCI manifest PUT alike, whatever ``If-Match`` or ``--force`` says.
Tags matching the exemption globs (default ``latest``) stay movable. A repository's own
setting (``repository_policies``) wins over the hub default (``FORKD_HUB_IMMUTABLE_TAGS``,
``FORKD_HUB_IMMUTABLE_EXEMPT``); ``NULL`` means "the hub default". Deleting a tag stays possible
(with delete scope): immutability is about what a name means while it exists.

**Retention** (applied by GC, ``registry/upkeep/retention.py``): among the tags matching ``pattern``
(default every tag), keep the ``keep_last`` most recently set and/or those set within the last
``keep_days`` days; a tag either rule keeps is kept. No rule: nothing expires.

Changing a policy needs the admin scope on the repository (a push token must not be able to
lift the immutability that protects what it pushes).

Errors: ``HubError`` (``INVALID_REQUEST`` naming the field, ``NAME_INVALID``, ``NAME_UNKNOWN``),
``Unauthorized``/``Forbidden``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import Repository
from hub_server.db.models_policy import RepositoryPolicy
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext
from hub_server.tagglobs import TagGlobError, TagGlobs

__all__ = [
    "MAX_KEEP",
    "EffectivePolicy",
    "PolicyChange",
    "Retention",
    "apply_policy_change",
    "effective_policy",
    "tag_is_immutable",
]

MAX_KEEP = 1_000_000
UNCHANGED: Any = object()
"""A :class:`PolicyChange` field left as this keeps the stored value."""


@dataclass(frozen=True)
class Retention:
    """Which matching tags GC keeps (a tag either rule keeps is kept)."""

    keep_last: int | None
    keep_days: int | None
    pattern: TagGlobs

    def to_json(self) -> dict[str, Any]:
        return {"keepLast": self.keep_last, "keepDays": self.keep_days, "pattern": str(self.pattern)}


@dataclass(frozen=True)
class EffectivePolicy:
    """A repository's policy with the hub defaults filled in (``*_source``: ``repository`` or ``hub``)."""

    immutable_tags: bool
    immutable_exempt: TagGlobs
    immutable_source: str
    retention: Retention | None

    def immutable(self, tag: str) -> bool:
        """Whether ``tag`` may not move to another digest once set."""
        return self.immutable_tags and not self.immutable_exempt.matches(tag)

    def to_json(self) -> dict[str, Any]:
        return {
            "immutableTags": self.immutable_tags,
            "immutableExempt": str(self.immutable_exempt),
            "immutableSource": self.immutable_source,
            "retention": None if self.retention is None else self.retention.to_json(),
        }


@dataclass(frozen=True)
class PolicyChange:
    """What a settings change asks for; ``UNCHANGED`` fields keep their value, ``None`` resets
    immutability to the hub default and removes retention."""

    immutable_tags: bool | None = UNCHANGED
    immutable_exempt: str | None = UNCHANGED
    retention: dict[str, Any] | None = UNCHANGED

    @property
    def empty(self) -> bool:
        return all(v is UNCHANGED for v in (self.immutable_tags, self.immutable_exempt, self.retention))


def combine(row: RepositoryPolicy | None, ctx: RegistryContext) -> EffectivePolicy:
    """The effective policy of a stored row (or none) under the context's hub defaults."""
    immutable = row.immutable_tags if row is not None and row.immutable_tags is not None else None
    exempt = row.immutable_exempt if row is not None and row.immutable_exempt is not None else ctx.immutable_exempt
    retention = None
    if row is not None and (row.retention_keep_last is not None or row.retention_keep_days is not None):
        retention = Retention(
            row.retention_keep_last, row.retention_keep_days, TagGlobs.parse(row.retention_pattern or "*")
        )
    return EffectivePolicy(
        ctx.immutable_tags if immutable is None else immutable,
        TagGlobs.parse(exempt),
        "hub" if immutable is None else "repository",
        retention,
    )


async def effective_policy(session: AsyncSession, ctx: RegistryContext, repo_id: int) -> EffectivePolicy:
    """The policy of repository ``repo_id`` (hub defaults where it sets nothing)."""
    return combine(await session.get(RepositoryPolicy, repo_id), ctx)


async def tag_is_immutable(session: AsyncSession, ctx: RegistryContext, repo_id: int, tag: str) -> bool:
    """Whether ``tag`` in repository ``repo_id`` may not move once set."""
    return (await effective_policy(session, ctx, repo_id)).immutable(tag)


def _invalid(field: str, message: str) -> HubError:
    return HubError(ErrorCode.INVALID_REQUEST, f"{field}: {message}", {"field": field})


def _globs(field: str, text: str) -> str:
    try:
        return str(TagGlobs.parse(text))
    except TagGlobError as e:
        raise _invalid(field, str(e)) from None


def _count(field: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KEEP:
        raise _invalid(field, f"must be a whole number from 1 to {MAX_KEEP} (or null), got {value!r}")
    return value


def validate_retention(value: dict[str, Any]) -> tuple[int | None, int | None, str | None]:
    """``{"keepLast", "keepDays", "pattern"}`` → the three columns. Raises HubError(INVALID_REQUEST)."""
    unknown = sorted(set(value) - {"keepLast", "keepDays", "pattern"})
    if unknown:
        raise _invalid("retention", f"unknown field(s) {', '.join(unknown)}: use keepLast, keepDays, pattern")
    keep_last = _count("retention.keepLast", value.get("keepLast"))
    keep_days = _count("retention.keepDays", value.get("keepDays"))
    if keep_last is None and keep_days is None:
        raise _invalid("retention", "give keepLast and/or keepDays (or null to remove the retention policy)")
    pattern = value.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise _invalid("retention.pattern", "must be a string of comma-separated tag globs")
    pattern = _globs("retention.pattern", pattern) if pattern is not None else None
    if pattern == "":
        raise _invalid("retention.pattern", "matches no tag; omit it to apply retention to every tag")
    return keep_last, keep_days, pattern


async def apply_policy_change(
    session: AsyncSession, ctx: RegistryContext, repo: Repository, change: PolicyChange
) -> dict[str, Any]:
    """Validate and stage ``change`` on ``repo`` (the caller commits); return what changed, as JSON.

    Raises HubError(INVALID_REQUEST) naming the bad field; nothing is staged then.
    """
    columns: dict[str, Any] = {}
    if change.immutable_tags is not UNCHANGED:
        if change.immutable_tags is not None and not isinstance(change.immutable_tags, bool):
            raise _invalid("immutableTags", "must be true, false or null (the hub default)")
        columns["immutable_tags"] = change.immutable_tags
    if change.immutable_exempt is not UNCHANGED:
        exempt = change.immutable_exempt
        columns["immutable_exempt"] = None if exempt is None else _globs("immutableExempt", exempt)
    if change.retention is not UNCHANGED:
        if change.retention is None:
            keep_last = keep_days = pattern = None
        elif isinstance(change.retention, dict):
            keep_last, keep_days, pattern = validate_retention(change.retention)
        else:
            raise _invalid("retention", "must be an object {keepLast, keepDays, pattern} or null")
        columns.update(retention_keep_last=keep_last, retention_keep_days=keep_days, retention_pattern=pattern)
    assert repo.id is not None
    row = await session.get(RepositoryPolicy, repo.id)
    if row is None:
        row = RepositoryPolicy(repository_id=repo.id)
    before = combine(row, ctx).to_json()
    for name, value in columns.items():
        setattr(row, name, value)
    after = combine(row, ctx).to_json()
    changed = {k: v for k, v in after.items() if before[k] != v}
    if columns:
        row.updated_at = ctx.clock()
        session.add(row)
    return changed
