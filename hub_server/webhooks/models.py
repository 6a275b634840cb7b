"""Webhook tables: the hooks, one row per event to deliver, one row per attempt.

::

    webhooks           (id, namespace, url, secret, events, created_at)
    webhook_deliveries (id = the delivery id, webhook_id, event, repository, payload, state,
                        attempts, next_attempt_at, lease_until, created_at, finished_at)
    webhook_attempts   (id, delivery_id, attempt, at, status_code, error, duration_ms)

``payload`` holds the exact JSON body sent (every retry sends the same bytes, signed again
with the same secret). ``state`` is ``pending`` until it ends ``delivered``, ``failed`` (every
attempt used) or ``refused`` (the SSRF guard: never retried). A replica claims a due pending
delivery by moving ``lease_until`` forward in a conditional update (docs/webhooks.md).
``secret`` is kept as given because signing needs it; it is never printed or returned.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Column, ForeignKey, Index, String, Text
from sqlmodel import Field, SQLModel

from hub_server.auth.models import UTCDateTime, utcnow

__all__ = ["DeliveryState", "Webhook", "WebhookAttempt", "WebhookDelivery"]


class DeliveryState:
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    REFUSED = "refused"


def _time(*, nullable: bool = False, index: bool = False) -> Any:
    if nullable:
        return Field(default=None, sa_column=Column(UTCDateTime(), nullable=True, index=index))
    return Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False, index=index))


class Webhook(SQLModel, table=True):
    __tablename__ = "webhooks"

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(sa_column=Column(String(64), nullable=False, index=True))
    url: str = Field(sa_column=Column(String(2048), nullable=False))
    secret: str = Field(sa_column=Column(String(256), nullable=False))
    events: str = Field(sa_column=Column(String(64), nullable=False))
    """Comma-separated event types (push, tag, delete)."""
    created_at: datetime = _time()


class WebhookDelivery(SQLModel, table=True):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),)

    id: str = Field(sa_column=Column(String(36), primary_key=True))
    webhook_id: int = Field(sa_column=Column(ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False, index=True))
    event: str = Field(sa_column=Column(String(16), nullable=False))
    repository: str = Field(sa_column=Column(String(256), nullable=False))
    payload: str = Field(sa_column=Column(Text, nullable=False))
    state: str = Field(default=DeliveryState.PENDING, sa_column=Column(String(16), nullable=False))
    attempts: int = 0
    next_attempt_at: datetime = _time()
    lease_until: datetime | None = _time(nullable=True)
    created_at: datetime = _time(index=True)
    finished_at: datetime | None = _time(nullable=True)


class WebhookAttempt(SQLModel, table=True):
    __tablename__ = "webhook_attempts"

    id: int | None = Field(default=None, primary_key=True)
    delivery_id: str = Field(
        sa_column=Column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    attempt: int
    at: datetime = _time()
    status_code: int | None = None
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    duration_ms: int = 0
