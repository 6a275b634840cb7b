"""Frame negotiation and cross-repository dedup below the graph: found only where the caller may read."""

from __future__ import annotations

from dataclasses import replace

from hub_server.settings import Limits
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, check, expect_error
from tests.manifest.images import same_bytes


def stored_pack_bytes(hub: Hub) -> int:
    async def total() -> int:
        return sum([(await hub.registry.ctx.store.stat(k)).size async for k in hub.registry.ctx.store.list("packs")])

    return hub.call(total)


def test_dedup_across_repositories_never_leaks_private_frames(hub: Hub, images, tmp_path):
    alice = hub.token("alice", "push:alice/*")
    bob = hub.token("bob", "push:bob/*")
    memory, vmstate = images[0]
    layer = hub.pusher(alice).build_layer("alice/base", memory, vmstate, tmp_path / "a")
    hub.pusher(alice).push_layer("alice/base", layer, "v1")
    (blob,) = layer.frames.values()
    frames = [f.digest for f in blob.frames]
    stored = stored_pack_bytes(hub)
    assert stored == blob.size  # every frame once, in one pack

    # Alice's repository is private: Bob learns nothing about its frames, nor can he read its blob.
    private = hub.client.post(
        "/api/v1/repositories/bob/vm/frames/query", json={"digests": frames}, headers=auth(bob)
    ).json()
    assert private == {"found": {}, "missing": len(frames)}
    expect_error(hub.client.get(f"/v2/bob/vm/blobs/{blob.digest}", headers=auth(bob)), 404, "NAME_UNKNOWN")
    # Referencing a frame he may not read fails exactly like referencing one that does not exist.
    bobs = hub.pusher(bob)
    same = bobs.build_layer("bob/vm", memory, vmstate, tmp_path / "b")
    assert same.digest == layer.digest  # identity is content
    missing_frame = "blake3:" + "0" * 64
    r_private = _recipe_referencing(bobs, "bob/vm", same.frames[blob.digest], frames[0])
    r_unknown = _recipe_referencing(bobs, "bob/vm", same.frames[blob.digest], missing_frame)
    assert r_private.status_code == r_unknown.status_code == 400
    assert r_private.json()["errors"][0]["code"] == r_unknown.json()["errors"][0]["code"] == "BLOB_UPLOAD_INVALID"
    assert r_private.json()["errors"][0]["message"] == r_unknown.json()["errors"][0]["message"]

    # Uploading them anyway works, and stores nothing twice.
    bobs.push_layer("bob/vm", same, "v1")
    assert bobs.transfer.frames_uploaded == len(frames) and bobs.transfer.frames_referenced == 0
    assert stored_pack_bytes(hub) == stored
    ((pulled, pulled_vmstate),) = bobs.pull("bob/vm", "v1", tmp_path / "pull-bob")
    assert same_bytes(pulled, memory) and pulled_vmstate == vmstate

    # Once public, the same frames are reported to Carol, and her push uploads no frame.
    hub.client.patch("/api/v1/repositories/alice/base", json={"public": True}, headers=auth(alice))
    carol = hub.pusher(hub.token("carol", "push:carol/*"))
    found = carol.query_frames("carol/vm", frames)
    assert set(found) == set(frames) and all(v["length"] > 0 for v in found.values())
    check(carol.push_recipe("carol/vm", same.frames[blob.digest]), 201)
    assert carol.transfer.bytes_uploaded == 0 and carol.transfer.frames_referenced == len(frames)
    metrics = hub.client.get("/metrics").text
    assert f"forkd_hub_chunks_stored_total {float(len(frames))}" in metrics
    assert f"forkd_hub_chunks_deduplicated_total {float(2 * len(frames))}" in metrics


def _recipe_referencing(pusher, repo, blob, frame_digest):
    """A recipe whose first frame is said to be held by the hub (``frame_digest``), the rest uploaded."""
    import httpx  # noqa: F401  (the pusher's client)

    from manifest import mediatypes as mt

    data = blob.path.read_bytes()
    location = check(pusher.http.post(f"/v2/{repo}/blobs/uploads/", headers=pusher.headers), 202).headers["Location"]
    payload = b"".join(data[f.offset : f.offset + f.length] for f in blob.frames[1:])
    check(
        pusher.http.patch(
            location,
            content=payload,
            headers={
                **pusher.headers,
                "Content-Range": f"0-{len(payload) - 1}",
                "Content-Type": "application/octet-stream",
            },
        ),
        202,
    )
    frames = [[f.digest, f.chunk, f.raw_length, f.length, i > 0] for i, f in enumerate(blob.frames)]
    frames[0][0] = frame_digest
    recipe = {"mediaType": mt.RECIPE, "digest": blob.digest, "size": blob.size, "frames": frames}
    uuid = location.rstrip("/").rsplit("/", 1)[-1]
    return pusher.http.post(
        f"/api/v1/repositories/{repo}/blobs/uploads/{uuid}/recipe", json=recipe, headers=pusher.headers
    )


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
    url = "/api/v1/repositories/acme/vm/frames/query"
    detail = expect_error(hub.client.post(url, json={"digests": digests}, headers=auth(token)), 413, "TOO_LARGE")
    assert detail["limit"] == 3
    expect_error(hub.client.post(url, json={"digests": ["nope"]}, headers=auth(token)), 400, "DIGEST_INVALID")
    # Callers who can neither read nor push learn only that (401 anonymous, 403 with a token),
    # whether or not the repository exists: the answer depends on their scopes alone.
    expect_error(hub.client.post(url, json={"digests": digests[:1]}), 401, "UNAUTHORIZED")
    reader = hub.token("reader", "pull:other/*")
    expect_error(hub.client.post(url, json={"digests": digests[:1]}, headers=auth(reader)), 403, "DENIED")
    expect_error(hub.client.post(url, json={"wrong": 1}, headers=auth(token)), 400, "INVALID_REQUEST")
