"""Blob uploads through the app: resumable sessions, verification, monolithic uploads, mounts, limits."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta

from sqlmodel import select

from hub_server.db.models import Blob, Upload
from hub_server.settings import Limits
from manifest.digest import digest_bytes
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error


def rows(hub: Hub, model) -> list:
    async def go():
        async with hub.registry.ctx.sessions() as session:
            return list((await session.exec(select(model))).all())

    return hub.call(go)


def keys(hub: Hub, prefix: str) -> list[str]:
    async def go():
        return [k async for k in hub.registry.ctx.store.list(prefix)]

    return hub.call(go)


def test_resumable_upload_reports_progress_and_continues(hub: Hub, admin_token: str):
    data = os.urandom(300_000)
    digest = str(digest_bytes(data))
    c = hub.client
    start = c.post("/v2/acme/blobs/blobs/uploads/", headers=auth(admin_token))
    assert start.status_code == 202
    location = start.headers["Location"]
    assert location.startswith("/v2/acme/blobs/blobs/uploads/")
    assert start.headers["Range"] == "0-0" and start.headers["Upload-Offset"] == "0"
    assert start.headers["Docker-Upload-UUID"] == location.rsplit("/", 1)[1]

    first = c.patch(location, content=data[:100_000], headers={**auth(admin_token), "Content-Range": "0-99999"})
    assert first.status_code == 202 and first.headers["Range"] == "0-99999"

    # a client that crashed asks how far it got, then resumes from there
    status = c.get(location, headers=auth(admin_token))
    assert status.status_code == 204 and status.headers["Range"] == "0-99999"
    assert status.headers["Upload-Offset"] == "100000"

    stale = c.patch(location, content=data[50_000:], headers={**auth(admin_token), "Content-Range": "50000-299999"})
    expect_error(stale, 416, "RANGE_INVALID")
    assert stale.headers["Range"] == "0-99999" and stale.headers["Location"] == location

    second = c.patch(
        location,
        content=data[100_000:200_000],
        headers={**auth(admin_token), "Content-Range": "bytes 100000-199999/300000"},
    )
    assert second.headers["Range"] == "0-199999"
    done = c.put(location, params={"digest": digest}, content=data[200_000:], headers=auth(admin_token))
    assert done.status_code == 201
    assert done.headers["Docker-Content-Digest"] == digest
    assert done.headers["Location"] == f"/v2/acme/blobs/blobs/{digest}"

    assert c.get(f"/v2/acme/blobs/blobs/{digest}", headers=auth(admin_token)).content == data
    expect_error(c.get(location, headers=auth(admin_token)), 404, "BLOB_UPLOAD_UNKNOWN")
    assert keys(hub, "uploads") == []


def test_wrong_digest_is_rejected_and_nothing_is_stored(hub: Hub, admin_token: str):
    data = os.urandom(70_000)
    c = hub.client
    location = c.post("/v2/acme/blobs/blobs/uploads/", headers=auth(admin_token)).headers["Location"]
    c.patch(location, content=data[:-1000], headers=auth(admin_token))  # truncated: the tail never arrives

    r = c.put(location, params={"digest": str(digest_bytes(data))}, headers=auth(admin_token))

    detail = expect_error(r, 400, "DIGEST_INVALID")
    assert detail["expected"] == str(digest_bytes(data)) and detail["actual"] == str(digest_bytes(data[:-1000]))
    assert c.head(f"/v2/acme/blobs/blobs/{digest_bytes(data)}", headers=auth(admin_token)).status_code == 404
    assert keys(hub, "blobs") == [] and keys(hub, "uploads") == []
    assert rows(hub, Blob) == [] and rows(hub, Upload) == []
    expect_error(c.get(location, headers=auth(admin_token)), 404, "BLOB_UPLOAD_UNKNOWN")


def test_monolithic_upload_with_either_algorithm(hub: Hub, admin_token: str):
    for algorithm in ("blake3", "sha256"):
        data = os.urandom(5000)
        digest = str(digest_bytes(data, algorithm))
        r = hub.client.post(
            "/v2/acme/mono/blobs/uploads/", params={"digest": digest}, content=data, headers=auth(admin_token)
        )
        assert r.status_code == 201 and r.headers["Docker-Content-Digest"] == digest
        assert hub.client.get(f"/v2/acme/mono/blobs/{digest}", headers=auth(admin_token)).content == data
    assert sorted(k.split("/")[1] for k in keys(hub, "blobs")) == ["blake3", "sha256"]


def test_a_failed_monolithic_upload_leaves_nothing(hub: Hub, admin_token: str):
    data = os.urandom(5000)
    r = hub.client.post(
        "/v2/acme/mono/blobs/uploads/",
        params={"digest": str(digest_bytes(b"other"))},
        content=data,
        headers=auth(admin_token),
    )
    expect_error(r, 400, "DIGEST_INVALID")
    assert keys(hub, "uploads") == [] and keys(hub, "blobs") == [] and rows(hub, Upload) == []


def test_identical_blob_is_stored_once(hub: Hub, admin_token: str):
    data = os.urandom(5000)
    digest = str(digest_bytes(data))
    for repo in ("acme/one", "acme/two"):
        assert (
            hub.client.post(
                f"/v2/{repo}/blobs/uploads/", params={"digest": digest}, content=data, headers=auth(admin_token)
            ).status_code
            == 201
        )
    assert len(keys(hub, "blobs")) == 1 and keys(hub, "uploads") == []


def test_cancel_deletes_the_session_and_its_bytes(hub: Hub, admin_token: str):
    c = hub.client
    location = c.post("/v2/acme/blobs/blobs/uploads/", headers=auth(admin_token)).headers["Location"]
    c.patch(location, content=b"x" * 1000, headers=auth(admin_token))
    assert c.delete(location, headers=auth(admin_token)).status_code == 204
    expect_error(c.get(location, headers=auth(admin_token)), 404, "BLOB_UPLOAD_UNKNOWN")
    assert keys(hub, "uploads") == [] and rows(hub, Upload) == []


def test_content_range_must_match_the_body(hub: Hub, admin_token: str):
    c = hub.client
    location = c.post("/v2/acme/blobs/blobs/uploads/", headers=auth(admin_token)).headers["Location"]
    r = c.patch(location, content=b"x" * 10, headers={**auth(admin_token), "Content-Range": "0-99"})
    expect_error(r, 400, "BLOB_UPLOAD_INVALID")
    expect_error(
        c.patch(location, content=b"x", headers={**auth(admin_token), "Content-Range": "a-b"}),
        400,
        "BLOB_UPLOAD_INVALID",
    )
    assert c.get(location, headers=auth(admin_token)).headers["Upload-Offset"] == "0"  # the bad append was undone


def test_blob_size_limit(make_hub):
    hub = make_hub(limits=replace(Limits(), blob_bytes=1000))
    token = hub.token("admin", "admin")
    location = hub.client.post("/v2/acme/big/blobs/uploads/", headers=auth(token)).headers["Location"]
    detail = expect_error(
        hub.client.patch(location, content=b"x" * 1001, headers=auth(token)), 400, "BLOB_UPLOAD_INVALID"
    )
    assert detail["limit"] == 1000


def test_sessions_are_scoped_to_their_repository_and_expire(hub: Hub, admin_token: str):
    c = hub.client
    location = c.post("/v2/acme/one/blobs/uploads/", headers=auth(admin_token)).headers["Location"]
    upload_id = location.rsplit("/", 1)[1]
    expect_error(c.get(f"/v2/acme/two/blobs/uploads/{upload_id}", headers=auth(admin_token)), 404, "NAME_UNKNOWN")
    c.post("/v2/acme/two/blobs/uploads/", headers=auth(admin_token))
    expect_error(
        c.get(f"/v2/acme/two/blobs/uploads/{upload_id}", headers=auth(admin_token)), 404, "BLOB_UPLOAD_UNKNOWN"
    )
    expect_error(c.get("/v2/acme/one/blobs/uploads/not-a-uuid", headers=auth(admin_token)), 404, "BLOB_UPLOAD_UNKNOWN")

    real_clock = hub.registry.ctx.clock
    hub.registry.ctx.clock = lambda: real_clock() + timedelta(hours=25)
    expect_error(c.get(location, headers=auth(admin_token)), 404, "BLOB_UPLOAD_UNKNOWN")


def test_cross_repository_mount_needs_read_access_to_the_source(hub: Hub, admin_token: str):
    data = os.urandom(4000)
    digest = str(digest_bytes(data))
    hub.client.post(
        "/v2/alice/private/blobs/uploads/", params={"digest": digest}, content=data, headers=auth(admin_token)
    )
    bob = hub.token("bob", "push:bob/*")

    fallback = hub.client.post(
        "/v2/bob/repo/blobs/uploads/", params={"mount": digest, "from": "alice/private"}, headers=auth(bob)
    )
    assert fallback.status_code == 202  # cannot read the source: an ordinary upload session instead
    expect_error(hub.client.get(f"/v2/bob/repo/blobs/{digest}", headers=auth(bob)), 404, "BLOB_UNKNOWN")

    mounted = hub.client.post(
        "/v2/acme/mine/blobs/uploads/", params={"mount": digest, "from": "alice/private"}, headers=auth(admin_token)
    )
    assert mounted.status_code == 201 and mounted.headers["Docker-Content-Digest"] == digest
    assert hub.client.get(f"/v2/acme/mine/blobs/{digest}", headers=auth(admin_token)).content == data


def test_a_session_leased_by_another_replica_is_busy_until_its_lease_ends(hub: Hub, admin_token: str):
    location = hub.client.post("/v2/acme/blobs/blobs/uploads/", headers=auth(admin_token)).headers["Location"]
    upload_id = location.rsplit("/", 1)[1]

    def lease(until_delta: timedelta) -> None:
        async def go():
            async with hub.registry.ctx.sessions() as session:
                row = await session.get(Upload, upload_id)
                row.lease_owner, row.lease_until = "other-replica", hub.registry.ctx.clock() + until_delta
                session.add(row)
                await session.commit()

        hub.call(go)

    lease(timedelta(seconds=12))  # another replica is streaming into this session right now
    busy = hub.client.patch(location, content=b"x" * 10, headers={**auth(admin_token), "Content-Range": "0-9"})
    detail = expect_error(busy, 409, "BLOB_UPLOAD_BUSY")
    assert detail["uuid"] == upload_id and 10 <= detail["retry_after"] <= 12
    assert busy.headers["Retry-After"] == str(detail["retry_after"])  # when that replica's lease runs out
    lease(timedelta(seconds=-1))  # that replica died: its lease ran out
    resumed = hub.client.patch(location, content=b"x" * 10, headers={**auth(admin_token), "Content-Range": "0-9"})
    assert resumed.status_code == 202 and resumed.headers["Range"] == "0-9"
    [row] = [r for r in rows(hub, Upload) if r.id == upload_id]
    assert (row.lease_owner, row.lease_until, row.size) == (None, None, 10)  # given back after the request
