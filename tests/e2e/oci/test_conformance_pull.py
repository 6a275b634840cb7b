"""OCI distribution-spec 1.1, workflow category **Pull**, against a real ``forkd-hub serve``.

Each test names the clause it checks ("Pulling manifests", "Pulling blobs", "Checking if content
exists in the registry", endpoints end-1 … end-3) and, for auth, the Docker token-auth spec.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.oci.layout import OCI_MANIFEST, sha256
from tests.e2e.oci.registry_client import Registry, digest_of, errors

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reg(oci_hub: HubProcess, admin_token: str) -> Iterator[Registry]:
    client = Registry(oci_hub.url, admin_token)
    yield client
    client.close()


@pytest.fixture(scope="module")
def image(reg: Registry) -> tuple[bytes, str]:
    return reg.push_image("pull/app", "v1", layer=b"0123456789" * 1000)


def test_api_version_check_challenges_then_answers(oci_hub: HubProcess, reg: Registry):
    """end-1 "Determining Support" + Docker token auth: 401 with a Bearer challenge, 200 once authenticated."""
    anonymous = httpx.get(f"{oci_hub.url}/v2/")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith(f'Bearer realm="{oci_hub.url}/v2/token",service=')
    assert reg.http.get("/v2/").status_code == 200


def test_pulling_a_manifest_by_tag_and_by_digest(reg: Registry, image):
    """ "Pulling manifests": GET by tag or digest MUST give the manifest with 200; Content-Type is its type;
    Docker-Content-Digest matches the body."""
    body, digest = image
    for ref in ("v1", digest):
        r = reg.http.get(f"/v2/pull/app/manifests/{ref}", headers={"Accept": OCI_MANIFEST})
        assert r.status_code == 200 and r.content == body
        assert r.headers["Content-Type"] == OCI_MANIFEST
        assert r.headers["Docker-Content-Digest"] == digest == sha256(r.content)


def test_a_missing_manifest_is_404(reg: Registry, image):
    """ "Pulling manifests": not found MUST be 404 (MANIFEST_UNKNOWN, code-7)."""
    for ref in ("nope", "sha256:" + "0" * 64):
        r = reg.http.get(f"/v2/pull/app/manifests/{ref}")
        assert r.status_code == 404 and errors(r) == ["MANIFEST_UNKNOWN"]


def test_pulling_a_blob_and_a_part_of_it(reg: Registry, image):
    """ "Pulling blobs": 200 with the blob, Docker-Content-Digest matching the body; Range gives 206."""
    layer = b"0123456789" * 1000
    digest = sha256(layer)
    r = reg.http.get(f"/v2/pull/app/blobs/{digest}")
    assert r.status_code == 200 and r.content == layer and r.headers["Docker-Content-Digest"] == digest
    part = reg.http.get(f"/v2/pull/app/blobs/{digest}", headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == layer[10:20]


def test_a_missing_blob_is_404(reg: Registry, image):
    """ "Pulling blobs": not found MUST be 404 (BLOB_UNKNOWN, code-1)."""
    r = reg.http.get(f"/v2/pull/app/blobs/{sha256(b'never pushed')}")
    assert r.status_code == 404 and errors(r) == ["BLOB_UNKNOWN"]


def test_checking_existence_with_head(reg: Registry, image):
    """ "Checking if content exists": HEAD MUST answer 200 for existing content (no body) and 404 otherwise."""
    body, digest = image
    m = reg.http.head(f"/v2/pull/app/manifests/{digest}")
    assert m.status_code == 200 and m.content == b""
    assert m.headers["Docker-Content-Digest"] == digest and int(m.headers["Content-Length"]) == len(body)
    layer = sha256(b"0123456789" * 1000)
    b = reg.http.head(f"/v2/pull/app/blobs/{layer}")
    assert b.status_code == 200 and int(b.headers["Content-Length"]) == 10_000
    assert reg.http.head(f"/v2/pull/app/manifests/{sha256(b'x')}").status_code == 404
    assert reg.http.head(f"/v2/pull/app/blobs/{sha256(b'x')}").status_code == 404


def test_sha512_blobs_and_manifests(reg: Registry):
    """ "Pulling blobs"/"Pulling manifests" by digest with the sha512 algorithm (image-spec descriptor
    "Registered algorithms": sha256 and sha512)."""
    data = b"hashed with sha512" * 100
    digest = reg.push_blob("pull/sha512", data, "sha512")
    r = reg.http.get(f"/v2/pull/sha512/blobs/{digest}")
    assert r.status_code == 200 and r.content == data and r.headers["Docker-Content-Digest"] == digest
    body, _ = reg.push_image("pull/sha512", "v1")
    manifest_digest = digest_of(body, "sha512")
    put = reg.put_manifest("pull/sha512", manifest_digest, body)
    assert put.status_code == 201 and put.headers["Docker-Content-Digest"] == manifest_digest
    got = reg.http.get(f"/v2/pull/sha512/manifests/{manifest_digest}")
    assert got.status_code == 200 and got.content == body


def test_anonymous_pull_of_a_private_repository_is_challenged_with_its_scope(oci_hub: HubProcess, image):
    """Docker token auth: the 401 names the scope to request, the same for a missing repository (no leak)."""
    for repo in ("pull/app", "pull/missing"):
        r = httpx.get(f"{oci_hub.url}/v2/{repo}/manifests/v1")
        assert r.status_code == 401
        assert r.headers["WWW-Authenticate"].endswith(f',scope="repository:{repo}:pull"')


def test_a_token_from_the_token_endpoint_pulls(oci_hub: HubProcess, admin_token: str, image):
    """Docker token auth "Requesting a token": Basic credentials and a scope give a bearer token for that scope."""
    body, _ = image
    r = httpx.get(
        f"{oci_hub.url}/v2/token",
        params={"service": "x", "scope": "repository:pull/app:pull"},
        auth=("anyone", admin_token),
    )
    assert r.status_code == 200
    token = r.json()["token"]
    got = httpx.get(f"{oci_hub.url}/v2/pull/app/manifests/v1", headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200 and got.content == body
    other = httpx.get(f"{oci_hub.url}/v2/pull/sha512/tags/list", headers={"Authorization": f"Bearer {token}"})
    assert other.status_code == 403  # outside the token's scope: ask for a token with it (RFC 6750)
    assert other.headers["WWW-Authenticate"].endswith(',scope="repository:pull/sha512:pull",error="insufficient_scope"')
