"""Immutable tags (``registry/content/policy.py`` + ``registry/content/tags.py``) on SQLite and PostgreSQL: the repository
setting over the hub default, the exemption globs, the native and OCI manifest PUTs, concurrent pushes,
and the settings API (admin only, all or nothing)."""

from __future__ import annotations

import asyncio

from hub_server.auth.scopes import Principal
from hub_server.errors import HubError
from hub_server.registry.content.tags import ANY
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, check, expect_error
from tests.hub_server.registry.push.test_oci_content import artifact, upload

LAYER = "application/vnd.oci.image.manifest.v1+json"


def _layers(hub: Hub, token: str, images, tmp_path):
    pusher = hub.pusher(token)
    a = pusher.build_layer("acme/py", images[0][0], images[0][1], tmp_path / "a", None)
    b = pusher.build_layer("acme/py", images[1][0], images[1][1], tmp_path / "b", a)
    pusher.push_layer("acme/py", a)
    pusher.push_layer("acme/py", b)
    return a, b


def _put(hub: Hub, token: str, tag: str, body: bytes, **headers: str):
    return hub.client.put(
        f"/v2/acme/py/manifests/{tag}", content=body, headers={**auth(token), "Content-Type": LAYER, **headers}
    )


def _tag(hub: Hub, token: str, tag: str) -> str:
    return check(hub.client.head(f"/v2/acme/py/manifests/{tag}", headers=auth(token)), 200).headers[
        "docker-content-digest"
    ]


def _settings(hub: Hub, token: str, **body: object):
    return hub.client.patch("/api/v1/repositories/acme/py", json=body, headers=auth(token))


def test_an_immutable_tag_is_set_once_and_a_repush_of_its_digest_succeeds(hub: Hub, admin_token, images, tmp_path):
    a, b = _layers(hub, admin_token, images, tmp_path)
    check(_put(hub, admin_token, "v1", a.manifest), 201)  # movable before the policy
    check(_put(hub, admin_token, "v1", b.manifest), 201)
    policy = check(_settings(hub, admin_token, immutableTags=True), 200).json()["policy"]
    assert policy == {
        "immutableTags": True,
        "immutableExempt": "latest",
        "immutableSource": "repository",
        "retention": None,
    }

    detail = expect_error(_put(hub, admin_token, "v1", a.manifest), 409, "TAG_IMMUTABLE")
    assert detail == {"tag": "v1", "actual": b.digest, "digest": a.digest}
    expect_error(_put(hub, admin_token, "v1", a.manifest, **{"If-Match": f'"{b.digest}"'}), 409, "TAG_IMMUTABLE")
    assert _tag(hub, admin_token, "v1") == b.digest
    check(_put(hub, admin_token, "v1", b.manifest), 201)  # the digest it names: a no-op success
    check(_put(hub, admin_token, "v1", b.manifest, **{"If-Match": f'"{b.digest}"'}), 201)
    check(_put(hub, admin_token, "v2", a.manifest), 201)  # a new tag is set once
    expect_error(_put(hub, admin_token, "v2", b.manifest), 409, "TAG_IMMUTABLE")
    check(_put(hub, admin_token, "latest", a.manifest), 201)  # exempt by default
    check(_put(hub, admin_token, "latest", b.manifest), 201)
    assert _tag(hub, admin_token, "latest") == b.digest

    check(_settings(hub, admin_token, immutableExempt="dev-*"), 200)
    expect_error(_put(hub, admin_token, "latest", a.manifest), 409, "TAG_IMMUTABLE")
    check(_put(hub, admin_token, "dev-1", a.manifest), 201)
    check(_put(hub, admin_token, "dev-1", b.manifest), 201)

    off = check(_settings(hub, admin_token, immutableTags=None, immutableExempt=None), 200).json()["policy"]
    assert off["immutableTags"] is False and off["immutableSource"] == "hub"
    check(_put(hub, admin_token, "v1", a.manifest), 201)
    assert _tag(hub, admin_token, "v1") == a.digest


def test_the_hub_default_applies_unless_the_repository_says_otherwise(make_hub, images, tmp_path):
    hub = make_hub(immutable_tags=True, immutable_exempt="latest,nightly")
    token = hub.token("admin", "admin")
    a, b = _layers(hub, token, images, tmp_path)
    check(_put(hub, token, "v1", a.manifest), 201)
    expect_error(_put(hub, token, "v1", b.manifest), 409, "TAG_IMMUTABLE")
    for exempt in ("latest", "nightly"):
        check(_put(hub, token, exempt, a.manifest), 201)
        check(_put(hub, token, exempt, b.manifest), 201)
    policy = check(hub.client.get("/api/v1/repositories/acme/py", headers=auth(token)), 200).json()["policy"]
    assert policy["immutableSource"] == "hub" and policy["immutableExempt"] == "latest,nightly"
    check(_settings(hub, token, immutableTags=False), 200)  # this repository opts out
    check(_put(hub, token, "v1", b.manifest), 201)
    assert _tag(hub, token, "v1") == b.digest


def test_the_oci_manifest_put_is_held_too(hub: Hub, admin_token):
    upload(hub, admin_token, "acme/py", b"{}")
    first, second = artifact(annotations={"n": "1"}), artifact(annotations={"n": "2"})

    def put(body: bytes):
        return hub.client.put(
            "/v2/acme/py/manifests/sig",
            content=body,
            headers={**auth(admin_token), "Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        )

    check(put(first), 201)
    check(_settings(hub, admin_token, immutableTags=True), 200)
    expect_error(put(second), 409, "TAG_IMMUTABLE")
    check(put(first), 201)


def test_concurrent_pushes_of_an_immutable_tag_have_exactly_one_winner(hub: Hub, admin_token, images, tmp_path):
    a, b = _layers(hub, admin_token, images, tmp_path)
    check(_settings(hub, admin_token, immutableTags=True), 200)
    admin = Principal.with_scopes("admin", ["admin"])
    manifests = hub.registry.manifests

    async def race():
        async def one(layer):
            try:
                scope = await hub.registry.scope(admin, "acme", "py", "push")
                await manifests.put(scope, "release", layer.manifest, LAYER, expect_tag=ANY)
                return layer.digest
            except HubError as e:
                return e.code.value

        return await asyncio.gather(one(a), one(b), one(a), one(b))

    results = hub.call(race)
    winner = _tag(hub, admin_token, "release")
    assert winner in (a.digest, b.digest)
    loser = b.digest if winner == a.digest else a.digest
    assert sorted(results) == sorted([winner, winner, "TAG_IMMUTABLE", "TAG_IMMUTABLE"]), (results, winner, loser)


def test_policy_changes_need_admin_and_a_bad_field_changes_nothing(hub: Hub, admin_token, images, tmp_path):
    _layers(hub, admin_token, images, tmp_path)
    pusher = hub.token("ci", "push:acme/*")
    expect_error(_settings(hub, pusher, immutableTags=True), 403, "DENIED")
    check(_settings(hub, pusher, description="still fine"), 200)  # push may change the description
    for body, field in (
        ({"immutableTags": True, "immutableExempt": "../x"}, "immutableExempt"),
        ({"retention": {"keepLast": 0}}, "retention.keepLast"),
        ({"retention": {"keepDays": -3}}, "retention.keepDays"),
        ({"retention": {}}, "retention"),
        ({"retention": {"keepLast": 2, "pattern": "a b"}}, "retention.pattern"),
    ):
        error = expect_error(_settings(hub, admin_token, description="changed", **body), 400, "INVALID_REQUEST")
        assert error == {"field": field}, (body, error)
    expect_error(_settings(hub, admin_token, retention={"keepLast": 2, "keep": 1}), 400, "INVALID_REQUEST")
    expect_error(_settings(hub, admin_token, immutableTags="yes"), 400, "INVALID_REQUEST")
    detail = check(hub.client.get("/api/v1/repositories/acme/py", headers=auth(admin_token)), 200).json()
    assert detail["description"] == "still fine"
    assert detail["policy"] == {
        "immutableTags": False,
        "immutableExempt": "latest",
        "immutableSource": "hub",
        "retention": None,
    }
    kept = check(_settings(hub, admin_token, retention={"keepLast": 3, "pattern": "nightly-*"}), 200).json()
    assert kept["policy"]["retention"] == {"keepLast": 3, "keepDays": None, "pattern": "nightly-*"}
    assert check(_settings(hub, admin_token, retention=None), 200).json()["policy"]["retention"] is None
