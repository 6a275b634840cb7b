"""Issue 16 item 1: a format-v2 layer whose file digest its chunks do not produce is refused at push.

Through the app, on both databases: the false digest is consistent everywhere a document repeats it
(config, chunk map, descriptor), so only the chunk-tree proof can catch it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hub_server.db.models import Manifest, Tag
from hub_server.registry.push.filetrees import ChunkListCache
from manifest import mediatypes as mt
from manifest.chunktree import ChunkList
from manifest.model import LayerConfig
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import BuiltLayer, auth, expect_error
from tests.hub_server.registry.push.test_manifests import count, put, upload_all

FALSE = "blake3:" + "ab" * 32
GiB = 1 << 30


def with_memory_digest(layer: BuiltLayer, digest: str, *, size: int | None = None) -> BuiltLayer:
    """``layer`` declaring ``digest`` (and ``size``) for memory.bin in its config and chunk map alike."""
    config = LayerConfig.from_json(layer.config)
    memory = config.files[mt.MEMORY_FILE]
    size = memory.size if size is None else size
    files = {**config.files, mt.MEMORY_FILE: replace(memory, digest=digest, size=size)}
    chunk_map = replace(layer.chunk_map, digest=digest, size=size)
    return layer.rebuild(chunk_map=chunk_map, config=replace(config, files=files).to_json())


def refused(hub: Hub, token: str, layer: BuiltLayer) -> dict:
    upload_all(hub.pusher(token), "acme/vm", layer)
    detail = expect_error(put(hub, token, "acme/vm", "v1", layer.manifest), 400, "MANIFEST_INVALID")
    assert detail["file"] == mt.MEMORY_FILE and detail["digest"] == layer.chunk_map.digest
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1", headers=auth(token)), 404, "MANIFEST_UNKNOWN")
    return detail


def test_a_base_declaring_a_false_file_digest_is_refused(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    good = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    detail = refused(hub, admin_token, with_memory_digest(good, FALSE))
    assert detail["actual"] == good.chunk_map.digest  # what the chunks really produce
    assert count(hub, Manifest) == 0 and count(hub, Tag) == 0
    pusher.push_layer("acme/vm", good, "v1")  # the true digest passes


def test_sixteen_gib_of_zeros_with_a_false_digest_is_refused_without_reading_data(
    hub: Hub, admin_token, images, tmp_path
):
    """The issue's case: a map of no data chunks over 16 GiB declares a digest zeros do not produce."""
    good = hub.pusher(admin_token).build_layer("acme/vm", *images[0], tmp_path / "b")
    entries = tuple(e for e in good.chunk_map.entries if e.digest is None)[:1]
    zeros = replace(good.chunk_map, entries=entries)
    bomb = with_memory_digest(good.rebuild(chunk_map=zeros), FALSE, size=16 * GiB)
    detail = refused(hub, admin_token, bomb)
    assert detail["actual"] == ChunkList(16 * GiB, good.chunk_map.chunk_size).digest()


def test_a_child_is_proven_from_its_parents_chunk_list(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    base = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    pusher.push_layer("acme/vm", base, "base")
    child = pusher.build_layer("acme/vm", *images[1], tmp_path / "c", base)
    # a digest that only a wrong parent list would produce: the child's chunks over an empty parent
    alone = ChunkList(child.chunk_map.size, child.chunk_map.chunk_size)
    alone.apply((e.index, e.digest) for e in child.chunk_map.entries)
    assert alone.digest() != child.chunk_map.digest
    refused(hub, admin_token, with_memory_digest(child, alone.digest()))
    pusher.push_layer("acme/vm", child, "v1")
    assert hub.client.get("/v2/acme/vm/manifests/v1", headers=auth(admin_token)).status_code == 200


@pytest.mark.parametrize("budget", [0, 1 << 20])
def test_chunk_list_cache_is_bounded_and_keyed_by_content(budget):
    cache = ChunkListCache(max_bytes=budget)
    lists = [ChunkList(n * (64 << 10), 64 << 10) for n in (4, 8, 16)]
    for item in lists:
        cache.put(item.digest(), item)
    kept = [cache.get(item.digest()) for item in lists]
    if budget == 0:
        assert kept == [None, None, None]
    else:
        assert kept == lists
        assert cache.get(FALSE) is None


def test_a_child_of_a_damaged_ancestor_names_the_ancestor(hub: Hub, admin_token, images, tmp_path, monkeypatch):
    """A base stored before the proof existed (switched off here) with a false digest: its child is refused."""
    from hub_server.registry.push import manifests

    pusher = hub.pusher(admin_token)
    good = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    lying = with_memory_digest(good, FALSE)

    async def unproven(*args, **kwargs):
        return None

    with monkeypatch.context() as m:
        m.setattr(manifests, "prove_file_digests", unproven)
        pusher.push_layer("acme/vm", lying, "base")
    child = pusher.build_layer("acme/vm", *images[1], tmp_path / "c", lying)
    child = child.rebuild(chunk_map=replace(child.chunk_map, parent_digest=FALSE))
    upload_all(pusher, "acme/vm", child)
    detail = expect_error(put(hub, admin_token, "acme/vm", "v1", child.manifest), 400, "MANIFEST_INVALID")
    assert detail == {"file": mt.MEMORY_FILE, "digest": FALSE, "actual": good.chunk_map.digest}
    message = put(hub, admin_token, "acme/vm", "v1", child.manifest).json()["errors"][0]["message"]
    assert f"layer {lying.digest} (an ancestor)" in message
