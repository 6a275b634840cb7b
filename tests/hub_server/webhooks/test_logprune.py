"""Pruning the delivery log (``webhooks/logprune.py``): the newest N finished deliveries per webhook stay,
older ones go, pending ones always stay; the CLI prunes with the same rules."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlmodel import select

from hub_server.webhooks.logprune import prune_deliveries
from hub_server.webhooks.models import (
    DeliveryState,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)


def _seed(hub) -> dict[str, list[str]]:
    """Two webhooks; per webhook 5 delivered (a day apart, newest first) and one old pending delivery."""
    ids: dict[str, list[str]] = {}

    async def go():
        now = hub.registry.ctx.clock()
        async with hub.registry.ctx.sessions() as session:
            for hook_name in ("a", "b"):
                hook = Webhook(namespace="acme", url=f"http://127.0.0.1:1/{hook_name}", secret="x", events="push")
                session.add(hook)
                await session.flush()
                ids[hook_name] = []
                for age in range(5):
                    delivery_id = str(uuid.uuid4())
                    ids[hook_name].append(delivery_id)
                    at = now - timedelta(days=age)
                    session.add(
                        WebhookDelivery(
                            id=delivery_id,
                            webhook_id=hook.id,
                            event="push",
                            repository="acme/vm",
                            payload="{}",
                            state=DeliveryState.DELIVERED,
                            attempts=1,
                            next_attempt_at=at,
                            created_at=at,
                            finished_at=at,
                        )
                    )
                    await session.flush()
                    session.add(WebhookAttempt(delivery_id=delivery_id, attempt=1, at=at, status_code=200))
                pending = str(uuid.uuid4())
                ids[hook_name + "-pending"] = [pending]
                session.add(
                    WebhookDelivery(
                        id=pending,
                        webhook_id=hook.id,
                        event="push",
                        repository="acme/vm",
                        payload="{}",
                        next_attempt_at=now,
                        created_at=now - timedelta(days=90),
                    )
                )
            await session.commit()

    hub.call(go)
    return ids


def _left(hub) -> tuple[set[str], int]:
    async def go():
        async with hub.registry.ctx.sessions() as session:
            deliveries = set((await session.exec(select(WebhookDelivery.id))).all())
            attempts = len((await session.exec(select(WebhookAttempt.id))).all())
            return deliveries, attempts

    return hub.call(go)


def test_keep_the_newest_per_webhook_and_drop_the_old_but_never_a_pending_one(hub):
    ids = _seed(hub)
    sessions, now = hub.registry.ctx.sessions, hub.registry.ctx.clock()
    assert hub.call(prune_deliveries, sessions, keep=100, max_age=timedelta(days=365), now=now) == 0
    assert hub.call(prune_deliveries, sessions, keep=3, max_age=timedelta(days=365), now=now) == 4
    left, attempts = _left(hub)
    assert left == {*ids["a"][:3], *ids["b"][:3], *ids["a-pending"], *ids["b-pending"]}
    assert attempts == 6
    assert hub.call(prune_deliveries, sessions, keep=3, max_age=timedelta(hours=36), now=now) == 2
    left, attempts = _left(hub)
    assert left == {*ids["a"][:2], *ids["b"][:2], *ids["a-pending"], *ids["b-pending"]}  # day 2 is over 36 h
    with pytest.raises(ValueError, match="keep must be at least 1"):
        hub.call(prune_deliveries, sessions, keep=0, max_age=timedelta(days=1), now=now)


def test_the_delivery_loop_prunes_the_log_now_and_then(hub):
    import asyncio

    from hub_server.webhooks.delivery import Deliverer, DeliveryPolicy
    from hub_server.webhooks.guard import AllowList

    ids = _seed(hub)
    policy = DeliveryPolicy(AllowList(), poll=0.05, log_keep=2, prune_every=0.05)
    deliverer = Deliverer(hub.registry.ctx.sessions, policy)

    want = {*ids["a"][:2], *ids["b"][:2]}

    async def run() -> set[str]:
        async with deliverer.running():
            for _ in range(200):
                left = (await _left_async(hub))[0]
                if left == want:
                    break
                await asyncio.sleep(0.05)
        return left

    # the old pending deliveries are refused (nothing is allowed), then pruned as over 30 days old
    assert hub.call(run) == want


async def _left_async(hub) -> tuple[set[str], int]:
    async with hub.registry.ctx.sessions() as session:
        deliveries = set((await session.exec(select(WebhookDelivery.id))).all())
        attempts = len((await session.exec(select(WebhookAttempt.id))).all())
        return deliveries, attempts


def test_the_prune_command(tmp_path, capsys):
    from litestar.testing import TestClient

    from hub_server.app import create_app
    from hub_server.cli import main
    from hub_server.settings import Settings
    from tests.hub_server.conftest import Hub

    data = tmp_path / "data"
    settings = Settings.for_data_dir(data)
    with TestClient(create_app(settings)) as client:
        ids = _seed(Hub(client, settings))
    assert main(["webhook", "prune", "--keep", "1", "--max-age", "30d", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out.startswith("pruned 8 finished deliveries (kept at most 1 per webhook")
    with TestClient(create_app(settings)) as client:
        left, _ = _left(Hub(client, settings))
    assert left == {ids["a"][0], ids["b"][0], *ids["a-pending"], *ids["b-pending"]}
    assert main(["webhook", "prune", "--keep", "0", "--data-dir", str(data)]) == 1
    assert "--webhook-log-keep: must be positive" in capsys.readouterr().err
