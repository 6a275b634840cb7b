"""Managing webhooks and queueing their deliveries.

:class:`WebhookService` adds, lists and removes the webhooks of a namespace, shows the delivery
log, and — subscribed to the audit log by ``compose.open_hub`` — turns each audited push, tag
move and delete into one pending delivery per matching webhook (:meth:`enqueue`). Queueing is
a single insert after the action committed; delivering is the job of
:class:`hub_server.webhooks.delivery.Deliverer`, never of the request.

Errors: ``ValueError`` (a bad namespace, URL, event name or secret, naming it),
``LookupError`` (no webhook with that id), ``HubError(NOT_FOUND)`` (:meth:`in_namespace`: none with that id
in that namespace, the answer of the API and of the web pages alike).
"""

from __future__ import annotations

import builtins
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import AuditEvent
from hub_server.auth.models import utcnow
from hub_server.errors import ErrorCode, HubError
from hub_server.webhooks.guard import split_url
from hub_server.webhooks.models import Webhook, WebhookAttempt, WebhookDelivery
from hub_server.webhooks.payload import EVENTS, body_bytes, event_fields

__all__ = ["WebhookInfo", "WebhookService"]

_NAMESPACE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
MAX_SECRET = 256
MAX_URL = 2048
MAX_LIST = 10_000


@dataclass(frozen=True)
class WebhookInfo:
    """A webhook as shown to operators: never its secret."""

    id: int
    namespace: str
    url: str
    events: tuple[str, ...]
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "url": self.url,
            "events": list(self.events),
            "createdAt": self.created_at.isoformat(),
        }

    @classmethod
    def of(cls, hook: Webhook) -> WebhookInfo:
        assert hook.id is not None
        return cls(hook.id, hook.namespace, hook.url, tuple(hook.events.split(",")), hook.created_at)


def check_events(events: list[str] | None) -> tuple[str, ...]:
    """The event types asked for (all when None). Raises ValueError naming an unknown one."""
    if not events:
        return EVENTS
    names = [e.strip() for item in events for e in item.split(",") if e.strip()]
    unknown = sorted(set(names) - set(EVENTS))
    if unknown or not names:
        raise ValueError(f"unknown webhook event(s) {', '.join(unknown) or '(none)'}: use {', '.join(EVENTS)}")
    return tuple(e for e in EVENTS if e in names)


class WebhookService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, clock: Callable[[], datetime] = utcnow) -> None:
        self._sessions = sessions
        self._clock = clock
        self._queued: list[Callable[[], Awaitable[None] | None]] = []

    def on_queued(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` after deliveries were queued (the in-process deliverer wakes up)."""
        self._queued.append(callback)

    async def add(self, namespace: str, url: str, secret: str, events: list[str] | None = None) -> WebhookInfo:
        """Create a webhook for every repository of ``namespace``. Raises ValueError (see module)."""
        if len(namespace) > 64 or not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"invalid namespace {namespace[:80]!r}: use [a-z0-9]+([._-][a-z0-9]+)*")
        if len(url) > MAX_URL:
            raise ValueError(f"webhook URL is over {MAX_URL} characters")
        split_url(url)
        if not secret or len(secret) > MAX_SECRET or secret != secret.strip():
            raise ValueError(f"the webhook secret must be 1-{MAX_SECRET} characters without surrounding spaces")
        hook = Webhook(
            namespace=namespace, url=url, secret=secret, events=",".join(check_events(events)), created_at=self._clock()
        )
        async with self._sessions() as session:
            session.add(hook)
            await session.commit()
            await session.refresh(hook)
        return WebhookInfo.of(hook)

    async def list(self, namespace: str | None = None) -> list[WebhookInfo]:
        """Webhooks (of one namespace, or all), oldest first."""
        query = select(Webhook).order_by(col(Webhook.id))
        if namespace is not None:
            query = query.where(Webhook.namespace == namespace)
        async with self._sessions() as session:
            return [WebhookInfo.of(h) for h in (await session.exec(query)).all()]

    async def in_namespace(self, namespace: str, webhook_id: int) -> WebhookInfo:
        """The webhook ``webhook_id`` of ``namespace``. Raises HubError(NOT_FOUND) if that namespace has none such."""
        for info in await self.list(namespace):
            if info.id == webhook_id:
                return info
        raise HubError(
            ErrorCode.NOT_FOUND,
            f"no webhook with id {webhook_id} in namespace {namespace!r}",
            {"namespace": namespace, "id": webhook_id},
        )

    async def remove(self, webhook_id: int) -> WebhookInfo:
        """Delete a webhook with its delivery log. Raises LookupError if there is none with that id."""
        async with self._sessions() as session:
            hook = await session.get(Webhook, webhook_id)
            if hook is None:
                raise LookupError(f"no webhook with id {webhook_id}")
            info = WebhookInfo.of(hook)
            ids = select(WebhookDelivery.id).where(WebhookDelivery.webhook_id == webhook_id)
            await session.exec(delete(WebhookAttempt).where(col(WebhookAttempt.delivery_id).in_(ids)))
            await session.exec(delete(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id))
            await session.delete(hook)
            await session.commit()
        return info

    async def deliveries(self, webhook_id: int | None = None, limit: int = 50) -> builtins.list[dict[str, Any]]:
        """The delivery log, newest first: each delivery with its attempts (oldest first)."""
        if not 1 <= limit <= MAX_LIST:
            raise ValueError(f"limit must be between 1 and {MAX_LIST}, got {limit}")
        query = (
            select(WebhookDelivery)
            .order_by(col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.id))
            .limit(limit)
        )
        if webhook_id is not None:
            query = query.where(WebhookDelivery.webhook_id == webhook_id)
        async with self._sessions() as session:
            rows = list((await session.exec(query)).all())
            attempts: dict[str, list[WebhookAttempt]] = {}
            if rows:
                found = await session.exec(
                    select(WebhookAttempt)
                    .where(col(WebhookAttempt.delivery_id).in_([r.id for r in rows]))
                    .order_by(col(WebhookAttempt.id))
                )
                for attempt in found.all():
                    attempts.setdefault(attempt.delivery_id, []).append(attempt)
        return [_delivery_json(row, attempts.get(row.id, [])) for row in rows]

    async def enqueue(self, event: AuditEvent) -> int:
        """Queue one delivery per webhook of the event's namespace that wants it; return how many."""
        converted = event_fields(event)
        if converted is None:
            return 0
        event_type, fields = converted
        async with self._sessions() as session:
            hooks = (await session.exec(select(Webhook).where(Webhook.namespace == fields["namespace"]))).all()
            wanted = [h for h in hooks if event_type in h.events.split(",")]
            now = self._clock()
            for hook in wanted:
                delivery_id = str(uuid.uuid4())
                session.add(
                    WebhookDelivery(
                        id=delivery_id,
                        webhook_id=hook.id,
                        event=event_type,
                        repository=fields["repository"],
                        payload=body_bytes(delivery_id, event_type, fields).decode(),
                        next_attempt_at=now,
                        created_at=now,
                    )
                )
            await session.commit()
        if wanted:
            for callback in self._queued:
                result = callback()
                if result is not None:
                    await result
        return len(wanted)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _delivery_json(row: WebhookDelivery, attempts: list[WebhookAttempt]) -> dict[str, Any]:
    return {
        "id": row.id,
        "webhook": row.webhook_id,
        "event": row.event,
        "repository": row.repository,
        "state": row.state,
        "attempts": [
            {
                "attempt": a.attempt,
                "at": a.at.isoformat(),
                "statusCode": a.status_code,
                "error": a.error,
                "durationMs": a.duration_ms,
            }
            for a in attempts
        ],
        "createdAt": row.created_at.isoformat(),
        "nextAttemptAt": _iso(row.next_attempt_at) if row.state == "pending" else None,
        "finishedAt": _iso(row.finished_at),
    }
