"""Chunk negotiation and cross-repository dedup: found only where the caller may read."""

from __future__ import annotations

from dataclasses import replace

from hub_server.settings import Limits
from manifest.diff import diff_files
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import CHUNK, auth, expect_error
from tests.manifest.images import same_bytes


def chunk_digests(memory) -> list[str]:
    return sorted({c.digest for c in diff_files(None, memory, CHUNK) if c.digest})


def test_dedup_across_repositories_never_leaks_private_chunks(hub: Hub, images, tmp_path):
    alice = hub.token("alice", "push:alice/*")
    bob = hub.token("bob", "push:bob/*")
    memory, vmstate = images[0]
    digests = chunk_digests(memory)
    hub.pusher(alice).push_layer("alice/base", hub.pusher(alice).build_layer("alice/base", memory, vmstate,
                                                                             tmp_path / "a"), "v1")

    # Alice's repository is private: Bob learns nothing about its chunks.
    private = hub.client.post("/api/v1/repositories/bob/vm/chunks/query", json={"digests": digests},
                              headers=auth(bob)).json()
    assert private == {"found": {}, "missing": len(digests)}
    mine = hub.client.post("/api/v1/repositories/alice/base/chunks/query", json={"digests": digests},
                           headers=auth(alice)).json()
    assert set(mine["found"]) == set(digests) and mine["missing"] == 0
    location = next(iter(mine["found"].values()))
    assert location["repository"] == "alice/base" and location["blobSize"] > location["offset"]

    # Once public, the same chunks are reported to Bob, and his identical layer uploads nothing.
    hub.client.patch("/api/v1/repositories/alice/base", json={"public": True}, headers=auth(alice))
    public = hub.client.post("/api/v1/repositories/bob/vm/chunks/query", json={"digests": digests},
                             headers=auth(bob)).json()
    assert set(public["found"]) == set(digests)
    pusher = hub.pusher(bob)
    layer = pusher.build_layer("bob/vm", memory, vmstate, tmp_path / "b")
    assert layer.data_blobs == {} and layer.new_chunks == 0
    pusher.push_layer("bob/vm", layer, "v1", mount_from="alice/base")
    assert pusher.transfer.bytes_uploaded == 0 and pusher.transfer.blobs_uploaded == []
    assert len(pusher.transfer.blobs_mounted) == 3  # config, chunk map, vmstate

    (pulled, pulled_vmstate), = pusher.pull("bob/vm", "v1", tmp_path / "pull")
    assert same_bytes(pulled, memory) and pulled_vmstate == vmstate
    metrics = hub.client.get("/metrics").text
    assert f"forkd_hub_chunks_stored_total {float(len(digests))}" in metrics
    assert f"forkd_hub_chunks_deduplicated_total {float(len(digests))}" in metrics


def test_second_push_of_an_identical_layer_uploads_nothing(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    pusher.push_chain("acme/vm", images, tmp_path / "first", "v1")
    before = pusher.transfer.bytes_uploaded
    again = hub.pusher(admin_token)
    again.push_chain("acme/vm", images, tmp_path / "second", "v1")
    assert before > 0 and again.transfer.bytes_uploaded == 0 and again.transfer.blobs_uploaded == []


def test_query_limits_and_access(make_hub):
    hub = make_hub(limits=replace(Limits(), chunks_per_query=3))
    token = hub.token("admin", "admin")
    digests = ["blake3:" + f"{i:064x}" for i in range(4)]
    detail = expect_error(hub.client.post("/api/v1/repositories/acme/vm/chunks/query", json={"digests": digests},
                                          headers=auth(token)), 413, "TOO_LARGE")
    assert detail["limit"] == 3
    expect_error(hub.client.post("/api/v1/repositories/acme/vm/chunks/query", json={"digests": ["nope"]},
                                 headers=auth(token)), 400, "DIGEST_INVALID")
    # Callers who can neither read nor push learn only that (401 anonymous, 403 with a token),
    # whether or not the repository exists: the answer depends on their scopes alone.
    expect_error(hub.client.post("/api/v1/repositories/acme/vm/chunks/query", json={"digests": digests[:1]}),
                 401, "UNAUTHORIZED")
    reader = hub.token("reader", "pull:other/*")
    expect_error(hub.client.post("/api/v1/repositories/acme/vm/chunks/query", json={"digests": digests[:1]},
                                 headers=auth(reader)), 403, "DENIED")
    expect_error(hub.client.post("/api/v1/repositories/acme/vm/chunks/query", json={"wrong": 1},
                                 headers=auth(token)), 400, "INVALID_REQUEST")
