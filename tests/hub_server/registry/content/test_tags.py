"""Tag moves are compare-and-swap: If-Match / If-None-Match on a manifest PUT, one winner under concurrency."""

from __future__ import annotations

import asyncio

from hub_server.auth.scopes import Principal
from hub_server.errors import HubError
from hub_server.registry.content.tags import ABSENT
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, check, expect_error


def _two_layers(hub: Hub, token: str, images, tmp_path):
    pusher = hub.pusher(token)
    a = pusher.build_layer("acme/py", images[0][0], images[0][1], tmp_path / "a", None)
    b = pusher.build_layer("acme/py", images[1][0], images[1][1], tmp_path / "b", a)
    pusher.push_layer("acme/py", a)
    pusher.push_layer("acme/py", b)
    return a, b


def _put(hub: Hub, token: str, layer, **headers: str):
    return hub.client.put(
        "/v2/acme/py/manifests/head",
        content=layer.manifest,
        headers={**auth(token), "Content-Type": "application/vnd.oci.image.manifest.v1+json", **headers},
    )


def _tag(hub: Hub, token: str) -> str:
    return check(hub.client.head("/v2/acme/py/manifests/head", headers=auth(token)), 200).headers[
        "docker-content-digest"
    ]


def test_tag_moves_only_from_where_the_push_expected(hub: Hub, admin_token, images, tmp_path):
    a, b = _two_layers(hub, admin_token, images, tmp_path)
    check(_put(hub, admin_token, a, **{"If-None-Match": "*"}), 201)
    conflict = expect_error(_put(hub, admin_token, b, **{"If-None-Match": "*"}), 409, "TAG_CONFLICT")
    assert conflict == {"tag": "head", "expected": None, "actual": a.digest}
    check(_put(hub, admin_token, b, **{"If-Match": f'"{a.digest}"'}), 201)
    assert _tag(hub, admin_token) == b.digest
    stale = expect_error(_put(hub, admin_token, a, **{"If-Match": f'"{a.digest}"'}), 409, "TAG_CONFLICT")
    assert stale == {"tag": "head", "expected": a.digest, "actual": b.digest}
    assert _tag(hub, admin_token) == b.digest
    check(_put(hub, admin_token, b, **{"If-Match": f'"{a.digest}"'}), 201)  # already there: a retried push
    check(_put(hub, admin_token, a), 201)  # no precondition: last writer wins (plain OCI clients)
    assert _tag(hub, admin_token) == a.digest
    expect_error(_put(hub, admin_token, a, **{"If-Match": '"x"', "If-None-Match": "*"}), 400, "INVALID_REQUEST")


def test_concurrent_moves_of_one_tag_have_one_winner(hub: Hub, admin_token, images, tmp_path):
    a, b = _two_layers(hub, admin_token, images, tmp_path)
    admin = Principal.with_scopes("admin", ["admin"])
    manifests = hub.registry.manifests

    async def race():
        async def one(layer):
            try:
                await manifests.put(
                    await hub.registry.scope(admin, "acme", "py", "push"),
                    "head",
                    layer.manifest,
                    "application/vnd.oci.image.manifest.v1+json",
                    expect_tag=ABSENT,
                )
                return layer.digest
            except HubError as e:
                return e.code

        return await asyncio.gather(*(one(layer) for layer in (a, b, a, b)))

    results = hub.call(race)
    winners = [r for r in results if r != "TAG_CONFLICT"]
    assert len(set(winners)) == 1, results  # one digest won; the same digest again is a retry, not a loser
    assert "TAG_CONFLICT" in results
    assert _tag(hub, admin_token) == winners[0]
