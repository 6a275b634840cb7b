"""OCI distribution-spec 1.1, workflow category **Content Discovery**, against a real ``forkd-hub serve``.

Clauses: "Listing Tags" (end-8a, end-8b), "Listing Referrers" (end-12a, end-12b), and the
Docker registry catalog (``/v2/_catalog``, outside the OCI spec but what mirroring tools use).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.oci.layout import OCI_INDEX, OCI_MANIFEST, descriptor
from tests.e2e.oci.registry_client import Registry, errors
from tests.e2e.oci.tokenflow import registry_token

pytestmark = pytest.mark.slow

TAGS = ["B", "a", "b", "latest", "v1", "v10", "v2"]


@pytest.fixture(scope="module")
def reg(oci_hub: HubProcess, admin_token: str) -> Iterator[Registry]:
    client = Registry(oci_hub.url, admin_token)
    yield client
    client.close()


@pytest.fixture(scope="module")
def tagged(reg: Registry) -> None:
    for tag in TAGS:
        reg.push_image("disc/tags", tag)


def test_listing_tags(reg: Registry, tagged):
    """end-8a: 200 with ``{"name", "tags"}`` in lexical order."""
    r = reg.http.get("/v2/disc/tags/tags/list")
    assert r.status_code == 200 and r.json() == {"name": "disc/tags", "tags": sorted(TAGS)}


def test_listing_tags_by_pages(reg: Registry, tagged):
    """end-8b: ``n`` results (fewer only at the end), starting after ``last``; ``Link`` to the next page."""
    first = reg.http.get("/v2/disc/tags/tags/list", params={"n": 3})
    assert first.json()["tags"] == sorted(TAGS)[:3]
    assert first.headers["Link"] == '</v2/disc/tags/tags/list?n=3&last=b>; rel="next"'
    rest = reg.http.get("/v2/disc/tags/tags/list", params={"n": 10, "last": "b"})
    assert rest.json()["tags"] == sorted(TAGS)[3:] and "Link" not in rest.headers
    assert reg.http.get("/v2/disc/tags/tags/list", params={"last": "v1"}).json()["tags"] == ["v10", "v2"]


def test_n_zero_is_an_empty_list_without_link(reg: Registry, tagged):
    """end-8b: "When n is zero, this endpoint MUST return an empty list, and MUST NOT include a Link header"."""
    r = reg.http.get("/v2/disc/tags/tags/list", params={"n": 0})
    assert r.status_code == 200 and r.json() == {"name": "disc/tags", "tags": []} and "Link" not in r.headers


def test_tags_of_a_missing_repository_are_404(reg: Registry):
    """end-8a failure: 404 (NAME_UNKNOWN, code-9)."""
    r = reg.http.get("/v2/disc/none/tags/list")
    assert r.status_code == 404 and errors(r) == ["NAME_UNKNOWN"]


@pytest.fixture(scope="module")
def referred(reg: Registry):
    image, digest = reg.push_image("disc/ref", "v1")
    subject = descriptor(OCI_MANIFEST, image)
    sig, sig_digest = reg.push_artifact(
        "disc/ref",
        "sig",
        "application/vnd.example.signature",
        subject=subject,
        annotations={"org.example.signer": "ci"},
    )
    sbom, sbom_digest = reg.push_artifact("disc/ref", "sbom", "application/vnd.example.sbom", subject=subject)
    plain, _ = reg.push_image("disc/ref", "plain", layer=b"an image that refers", subject=subject)
    return digest, {sig_digest: sig, sbom_digest: sbom}, plain


def test_listing_referrers(reg: Registry, referred):
    """end-12a "Listing Referrers": 200 with an image index whose descriptors carry the referrer's
    mediaType, size, digest, artifactType (its own, else its config's mediaType) and annotations."""
    digest, artifacts, plain = referred
    r = reg.http.get(f"/v2/disc/ref/referrers/{digest}")
    assert r.status_code == 200 and r.headers["Content-Type"] == OCI_INDEX
    index = r.json()
    assert index["schemaVersion"] == 2 and index["mediaType"] == OCI_INDEX
    by_digest = {m["digest"]: m for m in index["manifests"]}
    assert set(by_digest) == {*artifacts, descriptor(OCI_MANIFEST, plain)["digest"]}
    for d, body in artifacts.items():
        manifest = json.loads(body)
        assert by_digest[d]["mediaType"] == OCI_MANIFEST and by_digest[d]["size"] == len(body)
        assert by_digest[d]["artifactType"] == manifest["artifactType"]
        assert by_digest[d].get("annotations") == manifest.get("annotations")
    plain_entry = by_digest[descriptor(OCI_MANIFEST, plain)["digest"]]
    assert plain_entry["artifactType"] == "application/vnd.oci.image.config.v1+json"


def test_filtering_referrers_by_artifact_type(reg: Registry, referred):
    """end-12b: only the requested artifactType, and ``OCI-Filters-Applied: artifactType``."""
    digest, _artifacts, _ = referred
    r = reg.http.get(f"/v2/disc/ref/referrers/{digest}", params={"artifactType": "application/vnd.example.sbom"})
    assert r.headers["OCI-Filters-Applied"] == "artifactType"
    assert [m["artifactType"] for m in r.json()["manifests"]] == ["application/vnd.example.sbom"]


def test_referrers_of_an_unknown_digest_are_an_empty_index(reg: Registry, referred):
    """end-12a: "Assuming a repository is found, this request MUST return a 200 OK" even for a digest with
    no referrers; a malformed digest is 400."""
    r = reg.http.get("/v2/disc/ref/referrers/sha256:" + "1" * 64)
    assert r.status_code == 200 and r.json()["manifests"] == []
    bad = reg.http.get("/v2/disc/ref/referrers/sha256:nothex")
    assert bad.status_code == 400 and errors(bad) == ["DIGEST_INVALID"]


def test_referrers_are_per_repository(reg: Registry, referred):
    """Referrers are listed through the repository that holds them: another repository lists none."""
    digest, _, _ = referred
    reg.push_image("disc/other", "v1")
    assert reg.http.get(f"/v2/disc/other/referrers/{digest}").json()["manifests"] == []


def test_catalog_lists_only_readable_repositories_by_pages(oci_hub: HubProcess, reg: Registry, tagged):
    """``GET /v2/_catalog?n=&last=``: names in lexical order with ``Link``; a token sees what it may read,
    an anonymous caller the public repositories."""
    reg.push_image("cat/a", "v1")
    reg.push_image("cat/b", "v1")
    reg.push_image("cat/c", "v1")
    everything = reg.http.get("/v2/_catalog").json()["repositories"]
    assert everything == sorted(everything) and {"cat/a", "cat/b", "cat/c", "disc/tags"} <= set(everything)
    reader = oci_hub.token("catalog-reader", "pull:cat/*")
    seen = httpx.get(f"{oci_hub.url}/v2/_catalog", params={"n": 2}, headers={"Authorization": f"Bearer {reader}"})
    assert seen.json() == {"repositories": ["cat/a", "cat/b"]}
    assert seen.headers["Link"] == '</v2/_catalog?n=2&last=cat%2Fb>; rel="next"'
    more = httpx.get(
        f"{oci_hub.url}/v2/_catalog", params={"n": 2, "last": "cat/b"}, headers={"Authorization": f"Bearer {reader}"}
    )
    assert more.json() == {"repositories": ["cat/c"]} and "Link" not in more.headers
    assert httpx.get(f"{oci_hub.url}/v2/_catalog").json() == {"repositories": []}  # nothing public


def test_referrers_of_a_repository_that_does_not_exist_yet(oci_hub: HubProcess, reg: Registry):
    """end-12a: "If the registry supports the referrers API, the registry MUST NOT return a 404": a repository
    nothing was pushed to yet has no referrers (200, an empty index) for a caller who may read that name; anyone
    else is answered as for any read (404 NAME_UNKNOWN with a token, 401 without), whether it exists or not."""
    path = "/v2/disc/unborn/referrers/sha256:" + "2" * 64
    r = reg.http.get(path)
    assert r.status_code == 200 and r.headers["Content-Type"] == OCI_INDEX
    assert r.json() == {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    filtered = reg.http.get(path, params={"artifactType": "application/vnd.example.sbom"})
    assert filtered.json()["manifests"] == [] and filtered.headers["OCI-Filters-Applied"] == "artifactType"
    bad = reg.http.get("/v2/disc/unborn/referrers/sha256:nothex")
    assert bad.status_code == 400 and errors(bad) == ["DIGEST_INVALID"]
    reader = oci_hub.token("disc-reader", "pull:disc/*")
    pulled = registry_token(oci_hub.url, "r", reader, "repository:disc/unborn:pull")
    assert httpx.get(oci_hub.url + path, headers={"Authorization": f"Bearer {pulled}"}).status_code == 200
    stranger = oci_hub.token("disc-stranger", "pull:other/*")
    for repo in ("disc/unborn", "disc/ref"):
        r = httpx.get(
            f"{oci_hub.url}/v2/{repo}/referrers/sha256:{'2' * 64}", headers={"Authorization": f"Bearer {stranger}"}
        )
        assert r.status_code == 404 and errors(r) == ["NAME_UNKNOWN"]
        assert httpx.get(f"{oci_hub.url}/v2/{repo}/referrers/sha256:{'2' * 64}").status_code == 401
    assert reg.http.get("/v2/disc/unborn/tags/list").status_code == 404  # nothing was created by asking
