"""Issue 16 items 2 and 4 (client side): a hostile hub's sizes never make the client buffer or inflate
more than its own limits. The hub serves an honest push; a proxy forges the head link of the chain
(its manifest and config re-hashed, so every digest check passes) and serves extra blobs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid, HubError
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from manifest.digest import digest_bytes
from manifest.model import canonical_json
from tests.hub_server.registry.push.test_vmstate import zero_bomb

from .hubproxy import proxy

TIB = 1 << 40


def forging(
    inproc_hub, edit: Callable[[dict[str, Any], dict[str, Any]], None], blobs: dict[str, bytes], asked: list[str]
):
    """A tamper hook: ``edit(manifest, config)`` rewrites the chain's head link; ``blobs`` are served
    by digest; every blob GET is recorded in ``asked``."""

    def tamper(request: httpx.Request) -> httpx.Response | None:
        path = request.url.path
        if "/chain/" in path:
            r = inproc_hub.http.get(request.url.raw_path.decode(), headers=dict(request.headers))
            doc = r.json()
            head = doc["chain"][-1]
            manifest, config = json.loads(head["manifest"]), json.loads(head["config"])
            edit(manifest, config)
            config_bytes = canonical_json(config)
            manifest["config"]["digest"] = str(digest_bytes(config_bytes, "sha256"))
            manifest["config"]["size"] = len(config_bytes)
            manifest_bytes = canonical_json(manifest)
            head.update(
                manifest=manifest_bytes.decode(),
                config=config_bytes.decode(),
                digest=str(digest_bytes(manifest_bytes, "sha256")),
            )
            return httpx.Response(200, json=doc)
        if "/blobs/" in path:
            digest = path.rsplit("/", 1)[-1]
            asked.append(digest)
            if digest in blobs:
                return httpx.Response(200, content=blobs[digest])
        return None

    return tamper


def test_a_chunk_map_descriptor_of_a_tebibyte_is_refused_before_any_byte(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    forged_map: list[str] = []

    def edit(manifest, config):
        for layer in manifest["layers"]:
            if layer["mediaType"].startswith("application/vnd.forkd.chunkmap"):
                layer["size"] = TIB
                forged_map.append(layer["digest"])

    asked: list[str] = []
    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, forging(inproc_hub, edit, {}, asked)))
    with pytest.raises(HubError, match=r"declares 1,099,511,627,776 bytes, over the 67,108,864 bytes"):
        pull(other_store, client, ref, as_tag="py")
    assert forged_map and forged_map[0] not in asked  # refused before it was requested
    assert "py" not in other_store.tags()


def test_a_vmstate_bomb_is_refused_by_its_declared_size(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    bomb, zeros = zero_bomb(1 << 30)

    def edit(manifest, config):
        config["files"]["vmstate"] = {
            "size": 1 << 30,
            "digest": zeros,
            "sha256": "sha256:" + "0" * 64,
        }  # refused by size first
        vm = next(layer for layer in manifest["layers"] if "vmstate" in layer["mediaType"])
        vm.update(digest=str(digest_bytes(bomb, "sha256")), size=len(bomb))

    asked: list[str] = []
    client = HubClient(
        "http://hub.test",
        token,
        http=proxy(inproc_hub, forging(inproc_hub, edit, {str(digest_bytes(bomb, "sha256")): bomb}, asked)),
    )
    with pytest.raises(DigestInvalid, match="declares 1,073,741,824 bytes, over the 536,870,912-byte vmstate limit"):
        pull(other_store, client, ref, as_tag="py")
    assert str(digest_bytes(bomb, "sha256")) not in asked


def test_a_vmstate_inflating_past_its_declared_size_stops_in_bounded_memory(chain3, other_store, inproc_hub):
    import tracemalloc

    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    bomb, _ = zero_bomb(1 << 30)

    def edit(manifest, config):
        config["files"]["vmstate"] = {
            "size": 8192,
            "digest": str(digest_bytes(bytes(8192))),
            "sha256": str(digest_bytes(bytes(8192), "sha256")),
        }
        vm = next(layer for layer in manifest["layers"] if "vmstate" in layer["mediaType"])
        vm.update(digest=str(digest_bytes(bomb, "sha256")), size=len(bomb))

    asked: list[str] = []
    client = HubClient(
        "http://hub.test",
        token,
        http=proxy(inproc_hub, forging(inproc_hub, edit, {str(digest_bytes(bomb, "sha256")): bomb}, asked)),
    )
    tracemalloc.start()
    try:
        with pytest.raises(DigestInvalid, match="inflates past its declared 8,192 bytes"):
            pull(other_store, client, ref, as_tag="py")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    assert "py" not in other_store.tags()
