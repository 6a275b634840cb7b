"""The mirror's reads against a real upstream: exact bytes and headers, ranges, the token flow, writes refused,
private repositories never leaked, one upstream fetch for many first requests."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx

from hub_server.mirror.app import open_mirror
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient, auth, expect_error
from tests.services.servedapp import ServedHub


def test_manifests_and_blobs_are_the_upstreams_exact_bytes_and_headers(upstream, make_mirror, pushed, tmp_path):
    mirror = make_mirror()
    token = pushed["token"]
    with httpx.Client(base_url=upstream.url) as direct:
        for path in ("/v2/acme/private/manifests/v1", f"/v2/acme/private/manifests/{pushed['layers'][1].digest}"):
            want = direct.get(path, headers=auth(token))
            got = mirror.get(path, headers=auth(token))
            assert (got.status_code, got.content) == (200, want.content)
            for header in ("content-type", "docker-content-digest", "content-length"):
                assert got.headers[header] == want.headers[header], header
            head = mirror.head(path, headers=auth(token))
            assert head.headers["docker-content-digest"] == want.headers["docker-content-digest"]
            assert head.headers["content-length"] == want.headers["content-length"]
    # a whole chain, its blobs read by multi-range GETs, assembles to the pushed images
    pulled = PushClient(mirror, token).pull("acme/private", "v1", tmp_path / "out")
    assert [p.read_bytes() for p, _ in pulled] == [layer.memory.read_bytes() for layer in pushed["layers"]]
    blob = pushed["layers"][0].chunk_map.blobs[0]
    whole = mirror.get(f"/v2/acme/private/blobs/{blob}", headers=auth(token)).content
    one = mirror.get(f"/v2/acme/private/blobs/{blob}", headers={**auth(token), "Range": "bytes=10-19"})
    assert (one.status_code, one.content, one.headers["content-range"]) == (
        206,
        whole[10:20],
        f"bytes 10-19/{len(whole)}",
    )


def test_writes_are_refused_naming_the_upstream(upstream, make_mirror):
    mirror = make_mirror()
    for method, path in (
        ("POST", "/v2/acme/app/blobs/uploads/"),
        ("PUT", "/v2/acme/app/manifests/v1"),
        ("DELETE", "/v2/acme/app/manifests/v1"),
        ("PATCH", "/api/v1/repositories/acme/app"),
        ("POST", "/api/v1/tokens"),
    ):
        r = mirror.request(method, path, content=b"{}")
        detail = expect_error(r, 405, "UNSUPPORTED")
        assert detail == {"upstream": upstream.url}
        assert r.json()["errors"][0]["message"] == (
            f"this hub is a read-only mirror of {upstream.url}: push to {upstream.url}"
        )


def test_a_private_repository_is_not_leaked_through_a_warm_cache(upstream, make_mirror, pushed, tmp_path):
    mirror = make_mirror()
    token = pushed["token"]
    layer = pushed["layers"][0]
    blob = layer.chunk_map.blobs[0]
    PushClient(mirror, token).pull("acme/private", "v1", tmp_path / "warm")  # an authorized reader warms the cache
    assert mirror.get(f"/v2/acme/public/blobs/{blob}").status_code == 200  # the public copy: anyone
    stranger = upstream.token("stranger", "pull:other/*")
    paths = [
        "/v2/acme/private/manifests/v1",
        f"/v2/acme/private/manifests/{layer.digest}",
        f"/v2/acme/private/blobs/{blob}",  # the same digest the public repository holds: refused here
        "/api/v1/repositories/acme/private/chain/v1",
        "/v2/acme/private/tags/list",
    ]
    with httpx.Client(base_url=upstream.url) as direct:
        for headers in ({}, auth(stranger), auth("fkd_not-a-token")):
            for path in paths:
                want = direct.get(path, headers=headers)
                got = mirror.get(path, headers=headers)
                assert want.status_code in (401, 403, 404), (path, want.status_code)
                assert (got.status_code, got.json()["errors"][0]["code"]) == (
                    want.status_code,
                    want.json()["errors"][0]["code"],
                ), (path, headers)
                assert blob.encode() not in got.content
    # a reader of its own repository asks for acme/private's blob through it: the upstream does not hold that
    # digest there, so neither does the mirror, though it holds the bytes
    owner = auth(upstream.token("owner", "pull:other/*"))
    for path in (f"/v2/other/own/blobs/{blob}", f"/v2/other/own/manifests/{layer.digest}"):
        want = httpx.get(upstream.url + path, headers=owner)
        got = mirror.get(path, headers=owner)
        assert want.status_code == 404 and (got.status_code, got.json()) == (404, want.json()), path
        assert mirror.head(path, headers=owner).status_code == 404
    assert mirror.get("/v2/other/own/tags/list", headers=owner).status_code == 200
    # the challenge sends OCI clients to the mirror's own token endpoint
    challenge = mirror.get("/v2/acme/private/manifests/v1").headers["www-authenticate"]
    assert f'realm="{str(mirror.base_url).rstrip("/")}/v2/token"' in challenge


def test_an_oci_token_flow_goes_through_the_mirror(upstream, make_mirror, pushed):
    mirror = make_mirror()
    challenge = mirror.get("/v2/").headers["www-authenticate"]
    realm = challenge.split('realm="', 1)[1].split('"', 1)[0]
    service = challenge.split('service="', 1)[1].split('"', 1)[0]
    assert realm.startswith(str(mirror.base_url).rstrip("/"))
    basic = "Basic " + base64.b64encode(f"me:{pushed['token']}".encode()).decode()
    answer = mirror.get(
        realm, params={"service": service, "scope": "repository:acme/private:pull"}, headers={"Authorization": basic}
    )
    assert answer.status_code == 200, answer.text
    bearer = {"Authorization": f"Bearer {answer.json()['token']}"}
    assert mirror.get("/v2/", headers=bearer).status_code == 200
    r = mirror.get("/v2/acme/private/manifests/v1", headers=bearer)
    assert r.status_code == 200
    assert r.headers["docker-content-digest"] == pushed["layers"][-1].digest


def test_many_first_requests_for_one_blob_make_one_upstream_fetch(
    upstream: ServedHub, pushed: dict[str, Any], tmp_path: Path
):
    blob = pushed["layers"][0].chunk_map.blobs[0]
    settings = Settings.for_data_dir(tmp_path / "sf", mirror_of=upstream.url)
    authorization = f"Bearer {pushed['token']}"

    async def go() -> tuple[list[int], float, float]:
        async with open_mirror(settings) as mirror:
            objs = await asyncio.gather(*(mirror.blob(authorization, "acme/private", blob) for _ in range(8)))
            return (
                [o.size for o in objs],
                mirror.metrics.value("forkd_mirror_upstream_fetches_total", kind="blob"),
                mirror.metrics.value("forkd_mirror_upstream_bytes_total"),
            )

    sizes, fetches, fetched_bytes = asyncio.run(go())
    assert fetches == 1
    assert len(set(sizes)) == 1 and fetched_bytes == sizes[0]
    data = (tmp_path / "sf" / "blobs" / "mirror" / "sha256" / blob[7:9] / blob[7:]).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == blob


def test_forkds_registry_json_and_its_packs_come_through_the_mirror(upstream, make_mirror, pushed):
    mirror = make_mirror()
    base = str(mirror.base_url).rstrip("/")
    registry = mirror.get("/registry.json")
    assert registry.status_code == 200, registry.text
    version = registry.json()["packages"]["acme/public"]["versions"]["v1"]
    assert version["url"].startswith(f"{base}/packs/acme/public/@sha256:")
    for _ in range(2):  # the second from the cache
        pack = mirror.get(version["url"].removeprefix(base))
        assert pack.status_code == 200
        assert hashlib.sha256(pack.content).hexdigest() == version["sha256"] == pack.headers["x-checksum-sha256"]
    metrics = mirror.app.state.mirror.metrics
    assert metrics.value("forkd_mirror_upstream_fetches_total", kind="pack") == 1
    assert metrics.value("forkd_mirror_hits_total", kind="pack") == 1
    assert mirror.get("/packs/acme/private/v1.forkd-snapshot.tar.zst").status_code == 401  # private: as upstream
