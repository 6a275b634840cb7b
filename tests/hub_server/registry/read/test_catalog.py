"""The catalog: namespaces, repository search and pagination, repository detail, visibility changes."""

from __future__ import annotations

import pytest

from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error


@pytest.fixture
def catalog(hub: Hub, images, tmp_path):
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layer = pusher.build_layer("acme/py-base", *images[0], tmp_path / "l")
    for repo, public in [
        ("acme/py-base", True),
        ("acme/py-numpy", True),
        ("beta/secret", False),
        ("gamma/tools", True),
    ]:
        pusher.push_layer(repo, layer, "v1", public=public, mount_from="acme/py-base")
    hub.client.patch(
        "/api/v1/repositories/acme/py-numpy", json={"description": "NumPy on top of py-base"}, headers=auth(admin)
    )
    return admin, layer


def test_namespaces_and_repositories_are_filtered_by_visibility(hub: Hub, catalog):
    admin, _ = catalog
    assert hub.client.get("/api/v1/namespaces").json() == {"namespaces": ["acme", "gamma"]}
    assert hub.client.get("/api/v1/namespaces", headers=auth(admin)).json() == {"namespaces": ["acme", "beta", "gamma"]}
    names = [r["name"] for r in hub.client.get("/api/v1/repositories").json()["repositories"]]
    assert names == ["acme/py-base", "acme/py-numpy", "gamma/tools"]
    first = hub.client.get("/api/v1/repositories").json()["repositories"][0]
    assert first["public"] is True and first["tags"] == ["v1"] and first["updated"].endswith("Z")


def test_search_and_pagination(hub: Hub, catalog):
    admin, _ = catalog
    numpy = hub.client.get("/api/v1/repositories", params={"q": "NUMPY"}).json()["repositories"]
    assert [r["name"] for r in numpy] == ["acme/py-numpy"] and numpy[0]["description"].startswith("NumPy")
    in_acme = hub.client.get("/api/v1/repositories", params={"namespace": "acme", "q": "py"}).json()
    assert [r["name"] for r in in_acme["repositories"]] == ["acme/py-base", "acme/py-numpy"]

    page = hub.client.get("/api/v1/repositories", params={"n": 2}, headers=auth(admin))
    assert [r["name"] for r in page.json()["repositories"]] == ["acme/py-base", "acme/py-numpy"]
    assert page.headers["Link"] == '</api/v1/repositories?n=2&last=acme%2Fpy-numpy>; rel="next"'
    rest = hub.client.get("/api/v1/repositories", params={"n": 2, "last": "acme/py-numpy"}, headers=auth(admin))
    assert [r["name"] for r in rest.json()["repositories"]] == ["beta/secret", "gamma/tools"]
    assert "Link" not in rest.headers
    ns = hub.client.get("/api/v1/namespaces", params={"n": 1})
    assert ns.json() == {"namespaces": ["acme"]} and "last=acme" in ns.headers["Link"]


def test_tags_list_is_paginated(hub: Hub, catalog):
    admin, layer = catalog
    pusher = hub.pusher(admin)
    for tag in ("v2", "v3"):
        pusher.put_manifest("acme/py-base", tag, layer.manifest)
    page = hub.client.get("/v2/acme/py-base/tags/list", params={"n": 2})
    assert page.json() == {"name": "acme/py-base", "tags": ["v1", "v2"]}
    assert page.headers["Link"] == '</v2/acme/py-base/tags/list?n=2&last=v2>; rel="next"'
    assert hub.client.get("/v2/acme/py-base/tags/list", params={"n": 2, "last": "v2"}).json()["tags"] == ["v3"]
    empty = hub.client.get("/v2/acme/py-base/tags/list", params={"n": 0})  # distribution-spec end-8b
    assert empty.json() == {"name": "acme/py-base", "tags": []} and "Link" not in empty.headers
    expect_error(hub.client.get("/v2/acme/py-base/tags/list", params={"n": -1}), 400, "INVALID_REQUEST")


def test_repository_detail(hub: Hub, catalog):
    _, layer = catalog
    detail = hub.client.get("/api/v1/repositories/acme/py-base").json()
    assert detail["name"] == "acme/py-base" and detail["public"] is True
    (tag,) = detail["tags"]
    assert tag["name"] == "v1" and tag["digest"] == layer.digest and tag["size"] == len(layer.manifest)
    assert tag["logicalSize"] > 0 and tag["created"].endswith("Z")


def test_visibility_changes_need_push_or_admin(hub: Hub, catalog):
    _admin, _ = catalog
    owner = hub.token("owner", "push:beta/*")
    reader = hub.token("reader", "pull:beta/*")
    expect_error(hub.client.patch("/api/v1/repositories/beta/secret", json={"public": True}), 401, "UNAUTHORIZED")
    expect_error(
        hub.client.patch("/api/v1/repositories/beta/secret", json={"public": True}, headers=auth(reader)), 403, "DENIED"
    )
    r = hub.client.patch("/api/v1/repositories/beta/secret", json={"public": True}, headers=auth(owner))
    assert r.status_code == 200 and r.json()["public"] is True
    assert hub.client.get("/v2/beta/secret/tags/list").status_code == 200
    expect_error(
        hub.client.patch("/api/v1/repositories/beta/none", json={"public": True}, headers=auth(owner)),
        404,
        "NAME_UNKNOWN",
    )
    expect_error(
        hub.client.patch("/api/v1/repositories/beta/secret", json={"public": "yes"}, headers=auth(owner)),
        400,
        "INVALID_REQUEST",
    )
    events = hub.call(hub.registry.ctx.audit.query, action="visibility")
    assert [(e["actor"], e["repository"], e["detail"]) for e in events] == [("owner", "beta/secret", {"public": True})]
