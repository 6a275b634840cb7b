"""Access control exactly as docs/http-api.md says, through the app."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from hub_server.auth.models import utcnow
from hub_server.auth.tokens import TokenService
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error


@pytest.fixture
def pushed(hub: Hub, images, tmp_path):
    """A private repository acme/private and a public one acme/public, each with one tagged layer."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layer = pusher.build_layer("acme/private", *images[0], tmp_path / "l")
    pusher.push_layer("acme/private", layer, "v1")
    pusher.push_layer("acme/public", layer, "v1", public=True, mount_from="acme/private")
    data_blob = next(iter(layer.data_blobs))
    return layer, data_blob


READS = [
    "/v2/{repo}/manifests/v1",
    "/v2/{repo}/tags/list",
    "/v2/{repo}/blobs/{blob}",
    "/api/v1/repositories/{repo}/chain/v1",
    "/api/v1/repositories/{repo}/lineage/v1",
    "/api/v1/repositories/{repo}",
]


def test_anonymous_may_pull_public_repositories_only(hub: Hub, pushed):
    _layer, blob = pushed
    for path in READS:
        assert hub.client.get(path.format(repo="acme/public", blob=blob)).status_code == 200, path
        # a private repository and a missing one answer the same challenge: nothing leaks
        for repo in ("acme/private", "acme/nothing"):
            r = hub.client.get(path.format(repo=repo, blob=blob))
            assert expect_error(r, 401, "UNAUTHORIZED") == {"reason": "required"}, path
            assert r.headers["WWW-Authenticate"] == (
                f'Bearer realm="http://testserver.local/v2/token",service="testserver.local",'
                f'scope="repository:{repo}:pull"'
            )
    assert hub.client.head(f"/v2/acme/private/blobs/{blob}").status_code == 401


def test_a_token_without_pull_sees_private_repositories_as_missing(hub: Hub, pushed):
    _layer, blob = pushed
    other = hub.token("other", "pull:other/*", "push:other/*")
    for path in READS:
        r = hub.client.get(path.format(repo="acme/private", blob=blob), headers=auth(other))
        assert expect_error(r, 404, "NAME_UNKNOWN") == {"name": "acme/private"}, path
    # exactly what a repository that does not exist looks like
    missing = hub.client.get("/v2/acme/nothing/manifests/v1", headers=auth(other))
    assert expect_error(missing, 404, "NAME_UNKNOWN") == {"name": "acme/nothing"}


def test_a_pull_token_reads_its_private_repository(hub: Hub, pushed):
    _layer, blob = pushed
    reader = hub.token("reader", "pull:acme/*")
    for path in READS:
        assert hub.client.get(path.format(repo="acme/private", blob=blob), headers=auth(reader)).status_code == 200


@pytest.mark.parametrize("header", ["Bearer fkd_" + "x" * 43, "Bearer nonsense", "Basic dXNlcjpwdw==", "Bearer "])
def test_bad_tokens_get_401_everywhere_even_on_public_reads(hub: Hub, pushed, header):
    _layer, blob = pushed
    for path in [*READS, "/v2/", "/api/v1/repositories", "/api/v1/namespaces"]:
        r = hub.client.get(path.format(repo="acme/public", blob=blob), headers={"Authorization": header})
        expect_error(r, 401, "UNAUTHORIZED")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")


def test_expired_and_revoked_tokens_get_401(hub: Hub, pushed):
    async def expired_token() -> str:
        past = TokenService(hub.registry.ctx.sessions, clock=lambda: utcnow() - timedelta(days=2))
        return await past.create("old", ["pull:acme/*"], timedelta(days=1))

    token = hub.call(expired_token)
    assert expect_error(hub.client.get("/v2/acme/public/tags/list", headers=auth(token)), 401, "UNAUTHORIZED") == {
        "reason": "expired"
    }
    revoked = hub.token("gone", "pull:acme/*")
    hub.call(hub.client.app.state.tokens.revoke, "gone")
    assert expect_error(hub.client.get("/v2/acme/public/tags/list", headers=auth(revoked)), 401, "UNAUTHORIZED") == {
        "reason": "revoked"
    }


def test_writes_need_their_scope(hub: Hub, pushed, images, tmp_path):
    layer, _blob = pushed
    puller = hub.token("puller", "pull:acme/*")
    writes = [
        ("POST", "/v2/acme/public/blobs/uploads/", None),
        ("PUT", "/v2/acme/public/manifests/v2", layer.manifest),
        ("DELETE", "/v2/acme/public/manifests/v1", None),
        ("PATCH", "/api/v1/repositories/acme/public", b'{"public": false}'),
    ]
    for method, path, body in writes:
        anonymous = hub.client.request(method, path, content=body)
        expect_error(anonymous, 401, "UNAUTHORIZED")
        denied = hub.client.request(method, path, content=body, headers=auth(puller))
        detail = expect_error(denied, 403, "DENIED")
        assert detail["repository"] == "acme/public"
    # the same for a private repository: no hint whether it exists
    expect_error(hub.client.put("/v2/acme/private/manifests/v2", content=layer.manifest), 401, "UNAUTHORIZED")
    expect_error(
        hub.client.put("/v2/zzz/unknown/manifests/v2", content=layer.manifest, headers=auth(puller)), 403, "DENIED"
    )


def test_blobs_are_served_only_through_repositories_that_link_them(hub: Hub, pushed):
    layer, blob = pushed
    admin = hub.token("root", "admin")
    hub.client.post("/v2/acme/empty/blobs/uploads/", headers=auth(admin))  # exists, links nothing
    expect_error(hub.client.get(f"/v2/acme/empty/blobs/{blob}", headers=auth(admin)), 404, "BLOB_UNKNOWN")
    expect_error(
        hub.client.get(f"/v2/acme/empty/manifests/{layer.digest}", headers=auth(admin)), 404, "MANIFEST_UNKNOWN"
    )


def test_the_access_log_names_the_caller(hub: Hub, pushed, caplog):
    reader = hub.token("reader", "pull:acme/*")
    with caplog.at_level(logging.INFO, logger="hub_server.access"):
        hub.client.get("/v2/acme/private/tags/list", headers=auth(reader))
        hub.client.get("/v2/acme/public/tags/list")
    records = [r for r in caplog.records if r.name == "hub_server.access"]
    assert [(r.path, r.status, r.user) for r in records][-2:] == [
        ("/v2/acme/private/tags/list", 200, "reader"),
        ("/v2/acme/public/tags/list", 200, None),
    ]
