"""The storage gauge comes from the database and matches what the store holds, without walking it."""

from __future__ import annotations

from hub_server.registry.upkeep.usage import stored_bytes
from tests.hub_server.conftest import Hub


def _bytes_in(hub: Hub, prefix: str) -> int:
    store = hub.registry.ctx.store

    async def walk() -> int:
        return sum([(await store.stat(key)).size async for key in store.list(prefix)])

    return hub.call(walk)


def test_stored_bytes_counts_whole_blobs_and_packs_as_the_store_holds_them(hub: Hub, images, tmp_path):
    assert hub.call(stored_bytes, hub.registry.ctx) == 0
    pusher = hub.pusher(hub.token("admin", "admin"))
    pusher.push_chain("acme/vm", images[:2], tmp_path / "recipes", "v1")  # data blobs as recipes over packs
    layer = pusher.build_layer("acme/whole", *images[2], tmp_path / "whole", None)
    pusher.push_layer("acme/whole", layer, "v1", recipes=False)  # data blobs as objects of their own
    packs, blobs = _bytes_in(hub, "packs"), _bytes_in(hub, "blobs")
    assert packs > 0 and blobs > 0
    assert hub.call(stored_bytes, hub.registry.ctx) == packs + blobs
    hub.call(hub.registry.refresh_gauges, 0)
    assert hub.registry.ctx.metrics.storage_used_bytes._value.get() == packs + blobs  # noqa: SLF001
