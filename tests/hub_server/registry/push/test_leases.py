"""Upload session leases (registry/push/leases.py): held by a heartbeat for as long as a request works, busy
for others with the time to wait, taken over at once when this process's holder is gone, fenced on loss."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlmodel import select

from hub_server.db.models import Upload
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.push.leases import PROCESS_ID, UploadLeases
from hub_server.settings import Limits
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth

LEASE = timedelta(seconds=0.9)


@pytest.fixture
def short_lease_hub(make_hub) -> Hub:
    return make_hub(limits=replace(Limits(), upload_lease=LEASE))


def _session(hub: Hub, token: str) -> str:
    location = hub.client.post("/v2/acme/blobs/blobs/uploads/", headers=auth(token)).headers["Location"]
    return location.rsplit("/", 1)[1]


def _row(hub: Hub, upload_id: str) -> Upload:
    async def go() -> Upload:
        async with hub.registry.ctx.sessions() as session:
            return (await session.exec(select(Upload).where(Upload.id == upload_id))).one()

    return hub.call(go)


def _set_lease(hub: Hub, upload_id: str, owner: str, until: timedelta) -> None:
    async def go() -> None:
        async with hub.registry.ctx.sessions() as session:
            row = await session.get(Upload, upload_id)
            row.lease_owner, row.lease_until = owner, hub.registry.ctx.clock() + until
            session.add(row)
            await session.commit()

    hub.call(go)


def test_a_request_working_longer_than_the_lease_keeps_it_and_others_are_told_to_wait(short_lease_hub: Hub):
    hub = short_lease_hub
    upload_id = _session(hub, hub.token("ci", "push:acme/*"))
    leases = UploadLeases(hub.registry.ctx)

    async def scenario() -> list[object]:
        seen: list[object] = []
        async with leases.hold(upload_id) as lease:
            for _ in range(3):  # three lease lengths: only the heartbeat keeps it
                await asyncio.sleep(LEASE.total_seconds())
                try:
                    async with leases.hold(upload_id):
                        seen.append("taken")
                except HubError as e:
                    seen.append((e.code, e.headers["Retry-After"]))
            assert not lease.lost
        async with leases.hold(upload_id):  # given back at the end: free at once
            seen.append("free")
        return seen

    seen = hub.call(scenario)
    assert seen == [(ErrorCode.BLOB_UPLOAD_BUSY, "1")] * 3 + ["free"]
    row = _row(hub, upload_id)
    assert (row.lease_owner, row.lease_until) == (None, None)


def test_a_lease_this_process_left_behind_is_taken_over_at_once(hub: Hub):
    """A request that lost the database could not give its lease back; its retry reaching the same process
    takes the session over at once instead of waiting for the lease to run out."""
    upload_id = _session(hub, hub.token("ci", "push:acme/*"))
    leases = hub.registry.uploads.leases
    before = hub.registry.ctx.metrics.upload_lease_takeovers._value.get()
    _set_lease(hub, upload_id, PROCESS_ID + "0" * 24, timedelta(seconds=14))  # its request has ended

    async def take() -> str:
        async with leases.hold(upload_id) as lease:
            return lease.owner

    owner = hub.call(take)
    assert owner.startswith(PROCESS_ID) and owner != PROCESS_ID + "0" * 24
    assert hub.registry.ctx.metrics.upload_lease_takeovers._value.get() == before + 1


def test_a_lease_of_another_process_is_busy_until_it_runs_out(hub: Hub):
    upload_id = _session(hub, hub.token("ci", "push:acme/*"))
    _set_lease(hub, upload_id, "f" * 12 + "0" * 24, timedelta(seconds=14))  # a live request elsewhere

    async def take() -> None:
        async with hub.registry.uploads.leases.hold(upload_id):
            pass

    with pytest.raises(HubError) as busy:
        hub.call(take)
    assert busy.value.code is ErrorCode.BLOB_UPLOAD_BUSY and 13 <= busy.value.detail["retry_after"] <= 14


def test_a_holder_whose_lease_was_taken_stops_before_committing(hub: Hub):
    upload_id = _session(hub, hub.token("ci", "push:acme/*"))
    leases = hub.registry.uploads.leases

    async def scenario() -> bool:
        async with leases.hold(upload_id) as lease:
            _taken_elsewhere = "e" * 36
            async with hub.registry.ctx.sessions() as session:
                row = await session.get(Upload, upload_id)
                row.lease_owner = _taken_elsewhere  # it stalled past its lease; another replica took over
                session.add(row)
                await session.commit()
            with pytest.raises(HubError) as lost:
                await leases.renew(lease)  # what every commit does first
            assert lost.value.code is ErrorCode.BLOB_UPLOAD_BUSY
            return lease.lost

    assert hub.call(scenario) is True
    assert _row(hub, upload_id).lease_owner == "e" * 36  # the new holder's lease is left alone
