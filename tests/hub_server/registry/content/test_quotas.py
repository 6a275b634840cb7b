"""Namespace storage quotas on unique bytes (docs/limits.md), on SQLite and PostgreSQL: what is charged
(a shared base once inside a namespace, to each namespace that links it), and each write refused with
403 QUOTA_EXCEEDED before it stores anything."""

from __future__ import annotations

from hub_server.db.models_limits import UNLIMITED
from tests.hub_server.pushing import auth, expect_error
from tests.hub_server.registry.push.test_oci_content import artifact, digest, upload


def status(hub, namespace: str):
    return hub.call(hub.registry.quotas.status, namespace)


def test_a_shared_base_is_charged_once_per_namespace(make_hub, images, tmp_path):
    hub = make_hub()
    token = hub.token("ci", "push:acme/*", "push:other/*", "pull:acme/*")
    pusher = hub.pusher(token)
    layer = pusher.build_layer("acme/one", *images[0], tmp_path / "b")
    pusher.push_layer("acme/one", layer, "v1")
    one = status(hub, "acme").used
    assert one >= sum(p.stat().st_size for p in layer.data_blobs.values()) > 0
    pusher.push_layer("acme/two", layer, "v1", mount_from="acme/one")  # the same content again
    assert status(hub, "acme").used == one
    pusher.push_layer("other/copy", layer, "v1", mount_from="acme/one")  # another namespace pays too
    assert status(hub, "other").used == one and status(hub, "acme").source == "none"


def test_a_push_over_the_quota_is_refused_before_it_is_stored(make_hub, images, tmp_path):
    hub = make_hub()
    token = hub.token("ci", "push:acme/*")
    pusher = hub.pusher(token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    data = sum(p.stat().st_size for p in layer.data_blobs.values())
    hub.call(hub.registry.quotas.set, "acme", data // 2)
    # the recipe is declared before its frames are sent: refused there, nothing uploaded
    ((blob_digest, blob),) = layer.frames.items()
    r = pusher.push_recipe("acme/vm", blob)
    detail = expect_error(r, 403, "QUOTA_EXCEEDED")
    assert detail["quota"] == "storage" and detail["limit"] == data // 2 and detail["adding"] >= data // 2
    assert status(hub, "acme").used == 0
    # a whole upload is refused at its end, its bytes discarded
    r = hub.client.post(
        "/v2/acme/vm/blobs/uploads/",
        params={"digest": blob_digest},
        content=layer.data_blobs[blob_digest].read_bytes(),
        headers=auth(token),
    )
    expect_error(r, 403, "QUOTA_EXCEEDED")
    assert status(hub, "acme").used == 0
    # raised: it fits
    hub.call(hub.registry.quotas.set, "acme", 10 * data)
    pusher.push_layer("acme/vm", layer, "v1")
    assert 0 < status(hub, "acme").used <= 10 * data


def test_at_the_quota_no_upload_starts_but_tags_still_move(make_hub):
    body = artifact()
    quota = 2 + len(body)  # the empty config, and the manifest (a blob too)
    hub = make_hub(namespace_quota=quota)
    token = hub.token("ci", "push:acme/*")
    upload(hub, token, "acme/a", b"{}")
    assert status(hub, "acme").limit == quota and status(hub, "acme").source == "hub default"
    other = artifact(annotations={"more": "bytes"})
    detail = expect_error(
        hub.client.put(f"/v2/acme/a/manifests/{digest(other)}", content=other, headers=auth(token)),
        403,
        "QUOTA_EXCEEDED",
    )
    assert detail["used"] == 2 and detail["adding"] == len(other)
    assert hub.client.head(f"/v2/acme/a/manifests/{digest(other)}", headers=auth(token)).status_code == 404
    assert hub.client.put(f"/v2/acme/a/manifests/{digest(body)}", content=body, headers=auth(token)).status_code == 201
    assert status(hub, "acme").used == quota
    expect_error(hub.client.post("/v2/acme/a/blobs/uploads/", headers=auth(token)), 403, "QUOTA_EXCEEDED")
    # adding nothing new is always allowed
    assert hub.client.put("/v2/acme/a/manifests/v1", content=body, headers=auth(token)).status_code == 201
    hub.call(hub.registry.quotas.set, "acme", UNLIMITED)
    assert status(hub, "acme").limit is None
    assert hub.client.post("/v2/acme/a/blobs/uploads/", headers=auth(token)).status_code == 202


def test_usage_of_a_namespace_with_ten_thousand_links_is_one_query(make_hub):
    """docs/limits.md "Storage quotas": usage is counted when asked, one aggregate over the namespace's links.
    With 10,000 links (10 repositories, a fifth of the blobs linked twice) it is one SELECT whose result is
    charged once per distinct blob; the in-process CPU it costs is measured (SQLite runs in this process)."""
    import time

    from sqlalchemy import event

    from hub_server.db.models import Blob, Repository, RepositoryBlob
    from hub_server.db.types import utcnow
    from hub_server.registry.content.quotas import namespace_usage
    from hub_server.registry.core.sql import insert_ignore

    hub = make_hub()
    links, repositories = 10_000, 10
    blobs = [f"sha256:{i:064x}" for i in range(links * 5 // 6)]

    async def fill() -> None:
        now = utcnow()
        async with hub.registry.ctx.sessions() as session:
            repos = [
                Repository(namespace="big", name=f"r{i}", created_at=now, updated_at=now) for i in range(repositories)
            ]
            session.add_all(repos)
            await session.flush()
            await insert_ignore(session, Blob, [{"digest": d, "size": 1000, "created_at": now} for d in blobs])
            rows = [
                {"repository_id": repos[i % repositories].id, "blob_digest": d, "created_at": now}
                for i, d in enumerate(blobs)
            ]
            shared = blobs[: links - len(blobs)]  # linked a second time, in another repository
            rows += [
                {"repository_id": repos[(i + 1) % repositories].id, "blob_digest": d, "created_at": now}
                for i, d in enumerate(shared)
            ]
            assert len(rows) == links
            await insert_ignore(session, RepositoryBlob, rows)
            await session.commit()

    hub.call(fill)
    queries: list[str] = []
    engine = hub.client.app.state.engine.sync_engine

    def count(conn, cursor, statement, params, context, executemany) -> None:
        if "repository_blobs" in statement:  # not the hub's own background polls (webhook deliveries)
            queries.append(statement)

    async def usage() -> int:
        async with hub.registry.ctx.sessions() as session:
            return await namespace_usage(session, "big")

    hub.call(usage)  # warm: the statement compiled once
    event.listen(engine, "after_cursor_execute", count)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        used = hub.call(usage)
    finally:
        event.remove(engine, "after_cursor_execute", count)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"namespace usage over {links} links: {wall * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU in process")
    assert used == len(blobs) * 1000  # each distinct blob once
    assert len(queries) == 1, queries
    assert cpu < 5, cpu  # generous: measured ~15 ms (docs/limits.md)
