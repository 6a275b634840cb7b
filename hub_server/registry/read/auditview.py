"""A namespace's audit log, as its members may read it (``GET /api/v1/namespaces/{ns}/audit``, the web
catalog's namespace page).

Who: a caller that may write in the namespace (``auth.delegation.writes_in``: push or delete on one of its
repositories, or admin); anyone else is refused (401 anonymous, 403 a token), whether the namespace exists
or not. What, newest first: the events of the namespace's repositories the caller may push to or delete from
(push, tag, delete, visibility, update, policy, gc …), the ``token.create``/``token.revoke`` events of tokens
reaching the namespace that the caller could have made itself, and, for an admin, the namespace's
``webhook.add``/``webhook.remove`` events. Pages of ``limit`` events before the event id ``before``.

Errors: ``HubError(NAME_INVALID, INVALID_REQUEST)``, ``auth.errors.Unauthorized`` / ``Forbidden``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_
from sqlmodel import col, select

from hub_server.audit import AuditEvent
from hub_server.auth.delegation import may_manage, segment_matches, writes_in
from hub_server.auth.errors import Forbidden, Unauthorized
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.names import check_repository

__all__ = ["MAX_AUDIT_PAGE", "AuditPage", "AuditView"]

MAX_AUDIT_PAGE = 200
_TOKEN_ACTIONS = ("token.create", "token.revoke")
_WEBHOOK_ACTIONS = ("webhook.add", "webhook.remove")


@dataclass(frozen=True)
class AuditPage:
    events: list[dict[str, Any]]
    """Newest first, as ``AuditEvent.to_dict``."""
    next_before: int | None
    """The ``before`` of the next (older) page, or None at the end."""


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class AuditView:
    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx

    async def namespace(
        self, principal: Principal, namespace: str, *, limit: int = 50, before: int | None = None
    ) -> AuditPage:
        """The events of ``namespace`` the caller may read (the module docstring). Raises: see there."""
        check_repository(namespace, "x")  # the namespace's syntax (NAME_INVALID)
        if not 1 <= limit <= MAX_AUDIT_PAGE:
            raise HubError(
                ErrorCode.INVALID_REQUEST, f"limit must be 1 to {MAX_AUDIT_PAGE}, got {limit}", {"field": "limit"}
            )
        if not writes_in(principal, namespace):
            if principal.is_anonymous:
                raise Unauthorized(f"authentication required to read the audit log of {namespace}", "required")
            raise Forbidden(
                f"token {principal.name!r} cannot read the audit log of {namespace}: that needs push or delete on one "
                "of its repositories",
                "push",
                f"{namespace}/*",
            )
        where = or_(  # token and webhook events are few: which namespace they reach is checked below
            col(AuditEvent.repository).like(f"{_like(namespace)}/%", escape="\\"),
            and_(col(AuditEvent.repository).is_(None), col(AuditEvent.action).in_(_TOKEN_ACTIONS + _WEBHOOK_ACTIONS)),
        )
        events: list[dict[str, Any]] = []
        cursor, more = before, True
        async with self.ctx.sessions() as session:
            while len(events) < limit and more:  # rows the SQL prefilter lets through may still be someone else's
                query = select(AuditEvent).where(where)
                if cursor is not None:
                    query = query.where(col(AuditEvent.id) < cursor)
                rows = (await session.exec(query.order_by(col(AuditEvent.id).desc()).limit(limit * 2))).all()
                more = len(rows) == limit * 2
                for row in rows:
                    cursor = row.id
                    if self._visible(principal, namespace, row):
                        events.append(row.to_dict())
                        if len(events) == limit:
                            break
        return AuditPage(events, cursor if len(events) == limit else None)

    @staticmethod
    def _visible(principal: Principal, namespace: str, row: AuditEvent) -> bool:
        if row.repository is not None:
            return row.repository.split("/")[0] == namespace and (
                principal.can("push", row.repository) or principal.can("delete", row.repository)
            )
        try:
            detail = json.loads(row.detail)
        except ValueError:
            return False
        if row.action in _WEBHOOK_ACTIONS:
            return principal.is_admin and detail.get("namespace") == namespace
        if row.action in _TOKEN_ACTIONS:
            reaches = any(segment_matches(n, namespace) for n in detail.get("namespaces") or [])
            return reaches and may_manage(principal, detail.get("scopes") or [])
        return False
