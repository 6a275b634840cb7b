"""Fetch plans: a recipe blob's ranges mapped onto pack ranges, byte-exact; offered only where the
store presigns (a filesystem or memory hub answers the same GET with the bytes)."""

from __future__ import annotations

import random

from hub_server.registry.content.blobplan import BLOB_PLAN, plan_segments, wants_plan
from tests.hub_server.conftest import Hub


def test_plan_segments_map_any_ranges_onto_the_packs_byte_exact(hub: Hub, images, tmp_path):
    pusher = hub.pusher(hub.token("admin", "admin"))
    layers = pusher.push_chain("acme/vm", images, tmp_path / "p", "v1")
    ctx, rng = hub.registry.ctx, random.Random(7)
    checked = 0
    for layer in layers[1:]:  # links reuse frames of their parent: recipes over several packs
        for digest, path in layer.data_blobs.items():
            blob = path.read_bytes()
            for _ in range(20):
                ranges = []
                for _ in range(rng.randint(1, 5)):
                    first = rng.randrange(len(blob))
                    ranges.append((first, min(len(blob) - 1, first + rng.randrange(1 << 18))))
                packs, segments = hub.call(plan_segments, ctx, digest, ranges)
                covered = set()
                for offset, length, source, at in segments:
                    assert hub.call(ctx.store.read, packs[source], at, length) == blob[offset : offset + length]
                    covered.update(range(offset, offset + length))
                assert covered == {b for first, last in ranges for b in range(first, last + 1)}
                assert [s[0] for s in segments] == sorted(s[0] for s in segments)
                checked += 1
    assert checked


def test_a_hub_that_cannot_presign_answers_a_plan_request_with_the_bytes(hub: Hub, images, tmp_path):
    token = hub.token("admin", "admin")
    layers = hub.pusher(token).push_chain("acme/vm", images[:1], tmp_path / "p", "v1")
    digest, path = next(iter(layers[0].data_blobs.items()))
    r = hub.client.get(
        f"/v2/acme/vm/blobs/{digest}",
        headers={"Authorization": f"Bearer {token}", "Range": "bytes=10-99", "Accept": f"{BLOB_PLAN}, */*;q=0.5"},
    )
    assert r.status_code == 206 and r.content == path.read_bytes()[10:100]


def test_the_plan_media_type_is_recognised_only_when_listed():
    assert wants_plan(f"application/octet-stream, {BLOB_PLAN};q=0.9")
    assert not wants_plan("application/octet-stream, */*") and not wants_plan(None)
