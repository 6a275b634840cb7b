"""Delete: 409 HAS_DEPENDENTS, cascade, force, both (docs/http-api.md, "Delete")."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error
from tests.manifest.images import same_bytes


@pytest.fixture
def chain(hub: Hub, images, tmp_path):
    """acme/vm: base (tag base) → child (tag child) → grandchild (tag head)."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layers = []
    for i, tag in enumerate(["base", "child", "head"]):
        layer = pusher.build_layer("acme/vm", *images[i], tmp_path / tag, layers[-1] if layers else None)
        pusher.push_layer("acme/vm", layer, tag)
        layers.append(layer)
    return admin, pusher, layers


def delete(hub: Hub, token: str, ref: str, **params):
    return hub.client.delete(f"/v2/acme/vm/manifests/{ref}", params=params, headers=auth(token))


def test_a_manifest_with_dependents_is_refused_with_409(hub: Hub, chain):
    admin, _, layers = chain
    detail = expect_error(delete(hub, admin, layers[0].digest), 409, "HAS_DEPENDENTS")
    assert detail["dependents"] == [
        {"repository": "acme/vm", "tag": "head", "digest": layers[2].digest},
        {"repository": "acme/vm", "tag": "child", "digest": layers[1].digest},
    ]
    assert detail["others"] == 0
    expect_error(delete(hub, admin, "base"), 409, "HAS_DEPENDENTS")  # the last tag on it: same rule
    assert hub.client.get("/v2/acme/vm/manifests/base", headers=auth(admin)).status_code == 200


def test_cascade_and_force_together_are_unsupported(hub: Hub, chain):
    admin, _, layers = chain
    detail = expect_error(delete(hub, admin, layers[0].digest, cascade="true", force="true"), 400, "UNSUPPORTED")
    assert detail == {"cascade": True, "force": True}


def test_force_deletes_but_dependents_stay_pullable(hub: Hub, chain, images, tmp_path):
    admin, pusher, layers = chain
    r = delete(hub, admin, layers[0].digest, force="true")
    assert r.status_code == 202
    assert r.json() == {"removed": [{"repository": "acme/vm", "digest": layers[0].digest, "tags": ["base"]}]}
    expect_error(
        hub.client.get(f"/v2/acme/vm/manifests/{layers[0].digest}", headers=auth(admin)), 404, "MANIFEST_UNKNOWN"
    )
    expect_error(hub.client.get("/v2/acme/vm/manifests/base", headers=auth(admin)), 404, "MANIFEST_UNKNOWN")
    pulled = pusher.pull("acme/vm", "head", tmp_path / "pull")
    assert same_bytes(pulled[-1][0], images[2][0])
    # garbage collection keeps the parent alive while a child is reachable
    report = hub.call(hub.registry.gc.run, grace=timedelta(0))
    assert layers[0].digest not in report.manifests
    assert same_bytes(pusher.pull("acme/vm", "head", tmp_path / "again")[-1][0], images[2][0])


def test_cascade_removes_dependents_leaves_first(hub: Hub, chain):
    admin, _, layers = chain
    r = delete(hub, admin, "child", cascade="true")
    assert r.status_code == 202
    assert r.json()["removed"] == [
        {"repository": "acme/vm", "digest": layers[2].digest, "tags": ["head"]},
        {"repository": "acme/vm", "digest": layers[1].digest, "tags": ["child"]},
    ]
    assert hub.client.get("/v2/acme/vm/tags/list", headers=auth(admin)).json()["tags"] == ["base"]


def test_deleting_one_of_several_tags_keeps_the_manifest(hub: Hub, chain):
    admin, pusher, layers = chain
    pusher.put_manifest("acme/vm", "stable", layers[0].manifest)
    r = delete(hub, admin, "stable")
    assert r.status_code == 202
    assert r.json()["removed"] == [{"repository": "acme/vm", "digest": None, "tags": ["stable"]}]
    assert hub.client.get("/v2/acme/vm/manifests/base", headers=auth(admin)).status_code == 200


def test_delete_needs_delete_scope_and_hides_what_the_caller_cannot_see(hub: Hub, chain, tmp_path, images):
    _admin, pusher, layers = chain
    pusher_only = hub.token("pusher", "push:acme/*")
    expect_error(delete(hub, pusher_only, "head"), 403, "DENIED")

    # a dependent in a private repository elsewhere: counted, not named, and cascade cannot remove it
    grandchild = pusher.build_layer("zeta/secret", *images[2], tmp_path / "z", layers[1])
    pusher.push_layer("zeta/secret", grandchild, "mine", mount_from="acme/vm")
    deleter = hub.token("deleter", "delete:acme/*")
    detail = expect_error(delete(hub, deleter, "child"), 409, "HAS_DEPENDENTS")
    assert detail["dependents"] == [{"repository": "acme/vm", "tag": "head", "digest": layers[2].digest}]
    assert detail["others"] == 1
    denied = expect_error(delete(hub, deleter, "child", cascade="true"), 403, "DENIED")
    assert denied["others"] == 1
    assert delete(hub, deleter, "head").status_code == 202  # a leaf goes without fuss
    expect_error(delete(hub, deleter, "head"), 404, "MANIFEST_UNKNOWN")
