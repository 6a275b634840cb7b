"""Garbage collection: keeps what tags reach (parents included), removes the rest once past the grace period."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from sqlmodel import select

from hub_server.db.models import Blob, Chunk, Frame, Manifest, Pack, RecipeFrame, Upload
from hub_server.registry.core.paths import blob_key
from manifest.digest import digest_bytes
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error
from tests.manifest.images import same_bytes

LATER = timedelta(hours=25)  # past the grace period (1 h) and the upload lifetime (24 h)


def digests(hub: Hub, model, column) -> set[str]:
    async def go():
        async with hub.registry.ctx.sessions() as session:
            return set((await session.exec(select(column))).all())

    return hub.call(go)


def stored_keys(hub: Hub) -> set[str]:
    async def go():
        return {k async for k in hub.registry.ctx.store.list("")}

    return hub.call(go)


def gc(hub: Hub, **kwargs):
    """One GC run; ``later=True``: a run past the grace period, after a run now found the garbage."""
    if kwargs.pop("later", False):
        hub.call(hub.registry.gc.run)  # records what is unreferenced now; deletes nothing within the grace
        kwargs["now"] = hub.registry.ctx.clock() + LATER
    return hub.call(hub.registry.gc.run, **kwargs)


@pytest.fixture
def garbage(hub: Hub, images, tmp_path):
    """A tagged 3-link chain, an untagged layer, an orphan blob, a stale upload and an orphan object."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    chain = pusher.push_chain("acme/vm", images, tmp_path / "chain", "head")
    other = tmp_path / "other.bin"
    other.write_bytes(os.urandom(3 * 65536))
    untagged = pusher.build_layer("acme/vm", other, b"other", tmp_path / "untagged")
    pusher.push_layer("acme/vm", untagged)  # by digest only
    orphan = os.urandom(1000)
    orphan_digest = str(digest_bytes(orphan))
    pusher.upload("acme/vm", orphan, orphan_digest)
    stale = hub.client.post("/v2/acme/vm/blobs/uploads/", headers=auth(admin)).headers["Location"]
    hub.client.patch(stale, content=b"partial", headers=auth(admin))
    stray = "blake3:" + "ab" * 32
    hub.call(hub.registry.ctx.store.put, blob_key(stray), b"left by a crash")
    return pusher, chain, untagged, orphan_digest, stale, stray


def test_gc_keeps_what_tags_reach_and_removes_the_rest(hub: Hub, garbage, images, tmp_path):
    pusher, chain, untagged, orphan, stale, stray = garbage
    kept = {x.digest for x in chain}
    chain_blobs = kept | {b for x in chain for b in (*x.small_blobs, *x.data_blobs)}
    untagged_only = {untagged.digest, *untagged.small_blobs, *untagged.data_blobs} - chain_blobs

    report = gc(hub, later=True)

    assert report.manifests == [untagged.digest]
    assert set(report.blobs) == untagged_only | {orphan}
    assert report.uploads == [stale.rsplit("/", 1)[1]]
    assert report.orphan_objects == [blob_key(stray)]
    assert report.bytes_freed > 0 and not report.dry_run
    assert digests(hub, Manifest, Manifest.digest) == kept
    assert digests(hub, Blob, Blob.digest) == chain_blobs
    assert digests(hub, Upload, Upload.id) == set()
    # data blobs pushed as recipes have no object: their frames live in packs, which go with the
    # last recipe using them (the untagged layer's frames were all its own)
    data = {b for x in chain for b in x.data_blobs}
    packs = digests(hub, Pack, Pack.key)
    assert stored_keys(hub) == {blob_key(b) for b in chain_blobs - data} | packs
    assert len(packs) == len(data) and digests(hub, Frame, Frame.pack_key) == packs
    assert digests(hub, RecipeFrame, RecipeFrame.blob_digest) == data
    assert len(report.pack_objects) == 1 and report.pack_objects[0] not in packs
    assert digests(hub, Chunk, Chunk.blob_digest) == data
    # everything still pulls, base included (reachable only as a parent of the tagged head)
    for (memory, _), (original, _) in zip(pusher.pull("acme/vm", "head", tmp_path / "pull"), images, strict=True):
        assert same_bytes(memory, original)
    expect_error(
        hub.client.get(f"/v2/acme/vm/manifests/{untagged.digest}", headers=pusher.headers), 404, "MANIFEST_UNKNOWN"
    )
    assert gc(hub, later=True).blobs == []  # nothing left to collect


def test_dry_run_reports_without_deleting(hub: Hub, garbage):
    before = stored_keys(hub)
    report = gc(hub, later=True, dry_run=True)
    assert report.dry_run and report.manifests and report.blobs and report.uploads and report.orphan_objects
    assert stored_keys(hub) == before
    assert gc(hub, later=True).manifests == report.manifests


def test_nothing_younger_than_the_grace_period_is_collected(hub: Hub, garbage):
    report = gc(hub)  # now: everything was just written
    assert (report.manifests, report.blobs, report.uploads, report.orphan_objects) == ([], [], [], [])


def test_a_push_in_flight_keeps_its_fresh_blobs(hub: Hub, images, tmp_path):
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "l")
    for digest, path in layer.data_blobs.items():
        pusher.upload("acme/vm", path.read_bytes(), digest)
    for digest, data in layer.small_blobs.items():
        pusher.upload("acme/vm", data, digest)

    assert gc(hub).blobs == []  # uploaded a moment ago: within the grace period
    pusher.put_manifest("acme/vm", "v1", layer.manifest)  # the push completes after GC ran
    assert hub.client.get("/v2/acme/vm/manifests/v1", headers=auth(admin)).status_code == 200

    # the same blobs without a manifest, once old enough, would have been collected
    other = pusher.build_layer("acme/other", *images[1], tmp_path / "o")
    for digest, path in other.data_blobs.items():
        pusher.upload("acme/other", path.read_bytes(), digest)
    assert set(gc(hub, later=True).blobs) == set(other.data_blobs)


def test_gc_counts_runs_in_metrics_and_audits(hub: Hub, garbage):
    gc(hub)
    later = hub.registry.ctx.clock() + LATER
    gc(hub, now=later, dry_run=True)
    gc(hub, now=later)
    metrics = hub.client.get("/metrics").text
    assert 'forkd_hub_gc_runs_total{result="dry_run"} 1.0' in metrics
    assert 'forkd_hub_gc_runs_total{result="ok"} 2.0' in metrics
    events = hub.call(hub.registry.ctx.audit.query, action="gc")
    assert [e["detail"]["dryRun"] for e in events] == [False, True, False]


def test_periodic_gc_runs_in_the_server(make_hub):
    hub = make_hub(gc_interval=0.05)
    deadline = time.monotonic() + 10
    while 'forkd_hub_gc_runs_total{result="ok"}' not in hub.client.get("/metrics").text:
        assert time.monotonic() < deadline, "the periodic GC never ran"
        time.sleep(0.05)


def test_the_grace_period_starts_when_a_layer_became_unreferenced(hub: Hub, images, tmp_path):
    pusher = hub.pusher(hub.token("admin", "admin"))
    old = pusher.push_chain("acme/vm", images[:1], tmp_path / "old", "v1")[0]
    day = hub.registry.ctx.clock() + LATER  # the old layer is a day old by now
    other = tmp_path / "other.bin"
    other.write_bytes(os.urandom(3 * 65536))
    new = pusher.build_layer("acme/vm", other, b"new", tmp_path / "new")
    pusher.push_layer("acme/vm", new, "v1")  # the tag moves: the old layer is unreferenced from here on

    first = gc(hub, now=day)  # a pull that resolved v1 a moment ago may still be fetching the old layer
    assert first.manifests == [] and first.blobs == []
    assert gc(hub, now=day + timedelta(minutes=59)).manifests == []
    after_grace = gc(hub, now=day + timedelta(hours=1))
    assert after_grace.manifests == [old.digest]
    assert old.digest in after_grace.blobs


def test_one_replica_sweeps_at_a_time(hub: Hub, garbage):
    from hub_server.registry.upkeep.gcstate import GcBusy, acquire_lease

    async def hold(holder: str, at):
        async with hub.registry.ctx.sessions() as session:
            await acquire_lease(session, holder, at)

    hub.call(hold, "replica-b:123:abcd", hub.registry.ctx.clock())
    with pytest.raises(GcBusy, match="another garbage collection is running \\(replica-b:123:abcd"):
        gc(hub)
    assert gc(hub, dry_run=True).dry_run  # a dry run deletes nothing and needs no lease
    hub.call(hold, "replica-b:123:abcd", hub.registry.ctx.clock() - timedelta(hours=2))  # it died: lease expired
    assert not gc(hub).dry_run
