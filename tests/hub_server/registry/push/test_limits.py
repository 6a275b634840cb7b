"""What one push may add (docs/limits.md), on SQLite and PostgreSQL: annotation bytes, referrers per subject,
tags per repository, repositories per namespace; each refusal typed, with nothing written."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace

from hub_server.settings import Limits
from manifest import mediatypes as mt
from tests.hub_server.pushing import auth, expect_error
from tests.hub_server.registry.push.test_oci_content import artifact, digest, upload

SUBJECT = {"mediaType": mt.OCI_MANIFEST, "digest": digest(b"subject"), "size": 7}


def put(hub, token: str, repo: str, body: bytes, ref: str | None = None):
    return hub.client.put(f"/v2/{repo}/manifests/{ref or digest(body)}", content=body, headers=auth(token))


def test_annotations_over_the_limit_are_refused_before_anything_is_stored(make_hub):
    hub = make_hub(limits=replace(Limits(), annotation_bytes=1000))
    token = hub.token("ci", "push:acme/*")
    upload(hub, token, "acme/a", b"{}")
    fits = artifact(annotations={"note": "x" * 900})
    assert put(hub, token, "acme/a", fits).status_code == 201
    over = artifact(annotations={"note": "x" * 1000})
    detail = expect_error(put(hub, token, "acme/a", over), 413, "TOO_LARGE")
    assert detail["field"] == "annotations" and detail["limit"] == 1000
    assert hub.client.head(f"/v2/acme/a/manifests/{digest(over)}", headers=auth(token)).status_code == 404


def test_referrers_per_subject(make_hub):
    hub = make_hub(limits=replace(Limits(), referrers_per_subject=3))
    token = hub.token("ci", "push:acme/*")
    upload(hub, token, "acme/r", b"{}")
    bodies = [artifact(SUBJECT, annotations={"n": str(i)}) for i in range(4)]
    for body in bodies[:3]:
        assert put(hub, token, "acme/r", body).status_code == 201
    assert put(hub, token, "acme/r", bodies[0]).status_code == 201  # the same one again is no new referrer
    detail = expect_error(put(hub, token, "acme/r", bodies[3]), 403, "QUOTA_EXCEEDED")
    assert detail["quota"] == "referrers per subject" and detail["used"] == 3 and detail["limit"] == 3
    listed = hub.client.get(f"/v2/acme/r/referrers/{SUBJECT['digest']}", headers=auth(token)).json()["manifests"]
    assert len(listed) == 3
    # another subject, or another repository, has its own count
    other = artifact({**SUBJECT, "digest": digest(b"other")}, annotations={"n": "x"})
    assert put(hub, token, "acme/r", other).status_code == 201


def test_tags_per_repository(make_hub):
    hub = make_hub(limits=replace(Limits(), tags_per_repository=2))
    token = hub.token("ci", "push:acme/*")
    upload(hub, token, "acme/t", b"{}")
    body = artifact()
    assert put(hub, token, "acme/t", body, "a").status_code == 201
    assert put(hub, token, "acme/t", body, "b").status_code == 201
    assert put(hub, token, "acme/t", artifact(annotations={"v": "2"}), "b").status_code == 201  # a move
    detail = expect_error(put(hub, token, "acme/t", body, "c"), 403, "QUOTA_EXCEEDED")
    assert detail["quota"] == "tags per repository" and detail["tag"] == "c"
    assert hub.client.head("/v2/acme/t/manifests/c", headers=auth(token)).status_code == 404


def test_repositories_per_namespace(make_hub):
    hub = make_hub(limits=replace(Limits(), repositories_per_namespace=2))
    token = hub.token("ci", "push:acme/*", "push:other/*")
    upload(hub, token, "acme/one", b"{}")
    upload(hub, token, "acme/two", b"{}")
    upload(hub, token, "acme/two", b"{ }")  # an existing one takes more
    r = hub.client.post(
        "/v2/acme/three/blobs/uploads/", params={"digest": digest(b"{}")}, content=b"{}", headers=auth(token)
    )
    detail = expect_error(r, 403, "QUOTA_EXCEEDED")
    assert detail["quota"] == "repositories per namespace" and detail["used"] == 2
    assert hub.client.get("/v2/acme/three/tags/list", headers=auth(token)).status_code == 404
    upload(hub, token, "other/one", b"{}")  # another namespace has its own count


def test_a_declared_file_size_is_refused_before_anything_scales_with_it(make_hub, images, tmp_path):
    """Issue 27, item 2: a ~2 KB push declaring memory.bin of 64 GiB in 4 KiB chunks (an empty chunk map)
    made the hub allocate a chunk list of 512 MiB before it refused it. Scaled down: 1 GiB in 4 KiB chunks
    (an 8 MiB list) against a limit of 65,536 chunks: refused with 413 while allocating far less."""
    hub = make_hub(limits=replace(Limits(), file_chunks=1 << 16))
    token = hub.token("ci", "push:acme/*")
    pusher = hub.pusher(token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    size, chunk = 1 << 30, 4096
    declared = "blake3:" + "ab" * 32
    chunk_map = replace(layer.chunk_map, size=size, chunk_size=chunk, digest=declared, entries=(), blobs=())
    obj = json.loads(layer.config)
    obj["files"][mt.MEMORY_FILE].update(size=size, chunkSize=chunk, digest=declared)
    bomb = layer.rebuild(chunk_map=chunk_map, config=json.dumps(obj).encode(), data_blobs={})
    for digest_, data in bomb.small_blobs.items():
        pusher.ensure_blob("acme/vm", data, digest_)
    hub.client.get("/v2/acme/vm/tags/list", headers=auth(token))  # warm up
    tracemalloc.start()
    try:
        r = put(hub, token, "acme/vm", bomb.manifest, bomb.digest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    detail = expect_error(r, 413, "TOO_LARGE")
    assert detail["file"] == mt.MEMORY_FILE and detail["chunks"] == size // chunk and detail["chunkLimit"] == 1 << 16
    assert peak < 4 << 20, f"refusing it allocated {peak:,} bytes"
