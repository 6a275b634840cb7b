"""Manifest GETs through the read cache see every write of the same process at once.

The hub here keeps repository facts for an hour (``cache_ttl=3600``), so any write path that
forgot to invalidate would serve the old answer: a moved tag, a deleted tag or manifest, a
repository made private. Other processes (workers, replicas) are tests/e2e/test_read_cache.py.
"""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest

from tests.hub_server.pushing import auth, check, expect_error

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def push_image(
    http: httpx.Client, repo: str, ref: str, n: int, headers: dict[str, str], *, public: bool = False
) -> str:
    """Push a small OCI image (config + one layer, distinct for each ``n``) tagged ``ref``; its digest."""
    descriptors = []
    for media_type, data in (
        ("application/vnd.oci.image.config.v1+json", b'{"architecture":"amd64","os":"linux"}'),
        ("application/vnd.oci.image.layer.v1.tar", f"layer {n}".encode() * 50),
    ):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        check(http.post(f"/v2/{repo}/blobs/uploads/", params={"digest": digest}, content=data, headers=headers), 201)
        descriptors.append({"mediaType": media_type, "digest": digest, "size": len(data)})
    body = json.dumps(
        {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": descriptors[0], "layers": descriptors[1:]}
    ).encode()
    check(
        http.put(
            f"/v2/{repo}/manifests/{ref}",
            content=body,
            params={"public": "true"} if public else None,
            headers={**headers, "Content-Type": OCI_MANIFEST},
        ),
        201,
    )
    return "sha256:" + hashlib.sha256(body).hexdigest()


@pytest.fixture
def cached(make_hub):
    hub = make_hub(cache_ttl=3600.0)
    admin = auth(hub.token("admin", "admin"))
    first = push_image(hub.client, "acme/vm", "v1", 1, admin, public=True)
    r = check(hub.client.get("/v2/acme/vm/manifests/v1", headers={"Accept": OCI_MANIFEST}), 200)
    assert r.headers["Docker-Content-Digest"] == first
    assert hub.registry.ctx.cache.repository("acme", "vm") is not None  # the GET filled the cache
    return hub, admin, first


def test_a_moved_tag_is_served_at_once(cached) -> None:
    hub, admin, first = cached
    second = push_image(hub.client, "acme/vm", "v1", 2, admin)
    r = check(hub.client.get("/v2/acme/vm/manifests/v1"), 200)
    assert r.headers["Docker-Content-Digest"] == second != first
    assert hashlib.sha256(r.content).hexdigest() == second.removeprefix("sha256:")
    # both stay readable by digest (the bytes cache is by digest)
    assert check(hub.client.get(f"/v2/acme/vm/manifests/{first}"), 200).headers["Docker-Content-Digest"] == first


def test_a_deleted_tag_and_a_deleted_manifest_are_gone_at_once(cached) -> None:
    hub, admin, first = cached
    check(hub.client.get(f"/v2/acme/vm/manifests/{first}"), 200)  # cached by digest as well
    push_image(hub.client, "acme/vm", "v2", 1, admin)  # a second tag on the same manifest
    check(hub.client.delete("/v2/acme/vm/manifests/v1", headers=admin), 202)
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1"), 404, "MANIFEST_UNKNOWN")
    check(hub.client.get("/v2/acme/vm/manifests/v2"), 200)
    check(hub.client.delete(f"/v2/acme/vm/manifests/{first}", headers=admin), 202)
    expect_error(hub.client.get(f"/v2/acme/vm/manifests/{first}"), 404, "MANIFEST_UNKNOWN")
    assert hub.client.head("/v2/acme/vm/manifests/v2").status_code == 404


def test_a_repository_made_private_is_refused_to_anonymous_callers_at_once(cached) -> None:
    hub, admin, first = cached
    check(hub.client.patch("/api/v1/repositories/acme/vm", json={"public": False}, headers=admin), 200)
    r = hub.client.get("/v2/acme/vm/manifests/v1")
    assert r.status_code == 401 and 'scope="repository:acme/vm:pull"' in r.headers["WWW-Authenticate"]
    reader = auth(hub.token("reader", "pull:acme/*"))
    assert (
        check(hub.client.get("/v2/acme/vm/manifests/v1", headers=reader), 200).headers["Docker-Content-Digest"] == first
    )
    other = auth(hub.token("other", "pull:other/*"))
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1", headers=other), 404, "NAME_UNKNOWN")


def test_garbage_collection_forgets_every_repository(cached) -> None:
    hub, _admin, _first = cached
    hub.call(hub.registry.gc.run)
    assert hub.registry.ctx.cache.repository("acme", "vm") is None
