"""Pruning the delivery log: keep the last N finished deliveries per webhook, none older than D.

Only finished deliveries (``delivered``, ``failed``, ``refused``) are pruned, with their attempts;
a pending one is never removed, however old. ``serve``'s delivery loop prunes every
:data:`PRUNE_EVERY` (``FORKD_HUB_WEBHOOK_LOG_KEEP``, ``FORKD_HUB_WEBHOOK_LOG_MAX_AGE``), and
``forkd-hub webhook prune`` does it on demand.

Errors: ``ValueError`` for a keep count under 1 or a negative age; SQLAlchemy errors pass through.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.webhooks.models import DeliveryState, WebhookAttempt, WebhookDelivery

__all__ = ["PRUNE_EVERY", "prune_deliveries"]

PRUNE_EVERY = timedelta(minutes=10)
_BATCH = 500


async def prune_deliveries(
    sessions: async_sessionmaker[AsyncSession], *, keep: int, max_age: timedelta, now: datetime
) -> int:
    """Delete finished deliveries beyond the ``keep`` newest per webhook or created before
    ``now - max_age``; return how many went."""
    if keep < 1 or max_age < timedelta(0):
        raise ValueError(f"keep must be at least 1 and the age not negative (got {keep}, {max_age})")
    finished = col(WebhookDelivery.state) != DeliveryState.PENDING
    async with sessions() as session:
        doomed = set(
            (
                await session.exec(
                    select(WebhookDelivery.id).where(finished, col(WebhookDelivery.created_at) < now - max_age)
                )
            ).all()
        )
        hooks = (await session.exec(select(WebhookDelivery.webhook_id).where(finished).distinct())).all()
        for hook in hooks:
            doomed.update(
                (
                    await session.exec(
                        select(WebhookDelivery.id)
                        .where(finished, WebhookDelivery.webhook_id == hook)
                        .order_by(col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.id).desc())
                        .offset(keep)
                    )
                ).all()
            )
        ids = sorted(doomed)
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            await session.exec(delete(WebhookAttempt).where(col(WebhookAttempt.delivery_id).in_(batch)))
            await session.exec(delete(WebhookDelivery).where(col(WebhookDelivery.id).in_(batch), finished))
        await session.commit()
    return len(ids)
