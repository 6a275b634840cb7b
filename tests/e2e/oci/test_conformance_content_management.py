"""OCI distribution-spec 1.1, workflow category **Content Management**, against a real ``forkd-hub serve``.

Clauses: "Deleting tags", "Deleting Manifests" (end-9), "Deleting Blobs" (end-10); storage is
reclaimed by ``forkd-hub gc`` (docs/http-api.md, "Delete").
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.e2e.oci.layout import OCI_MANIFEST, descriptor, sha256
from tests.e2e.oci.registry_client import Registry, errors
from tests.e2e.oci.tokenflow import CraneClient, challenge_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reg(oci_hub: HubProcess, admin_token: str) -> Iterator[Registry]:
    client = Registry(oci_hub.url, admin_token)
    yield client
    client.close()


def gc(hub: HubProcess) -> dict:
    out = subprocess.run(
        forkd_hub("gc", "--grace", "0", "--json"), env=hub.env, check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return json.loads(out)


def test_deleting_a_tag_keeps_the_manifest(reg: Registry):
    """ "Deleting tags": 202; the tag is gone, the manifest stays pullable by digest."""
    body, digest = reg.push_image("mgmt/tags", "v1")
    reg.put_manifest("mgmt/tags", "v2", body)
    r = reg.http.delete("/v2/mgmt/tags/manifests/v1")
    assert r.status_code == 202
    assert reg.http.get("/v2/mgmt/tags/manifests/v1").status_code == 404
    assert reg.http.get("/v2/mgmt/tags/tags/list").json()["tags"] == ["v2"]
    reg.http.delete("/v2/mgmt/tags/manifests/v2")
    assert reg.http.get("/v2/mgmt/tags/tags/list").json()["tags"] == []
    assert reg.http.get(f"/v2/mgmt/tags/manifests/{digest}").content == body


def test_deleting_a_manifest_by_digest(reg: Registry):
    """ "Deleting Manifests": 202; afterwards GET is 404 and no tag points at it; a missing repository is 404."""
    _, digest = reg.push_image("mgmt/manifests", "v1")
    r = reg.http.delete(f"/v2/mgmt/manifests/manifests/{digest}")
    assert r.status_code == 202
    missing = reg.http.get(f"/v2/mgmt/manifests/manifests/{digest}")
    assert missing.status_code == 404 and errors(missing) == ["MANIFEST_UNKNOWN"]
    assert reg.http.get("/v2/mgmt/manifests/tags/list").json()["tags"] == []
    assert reg.http.delete(f"/v2/mgmt/nothing/manifests/{digest}").status_code == 404


def test_deleting_a_referrer_removes_it_from_the_referrers_list(reg: Registry):
    """ "Deleting Manifests": a deleted manifest with a subject MUST leave the referrers list."""
    image, digest = reg.push_image("mgmt/ref", "v1")
    _, sig = reg.push_artifact(
        "mgmt/ref", "sig", "application/vnd.example.sig", subject=descriptor(OCI_MANIFEST, image)
    )
    assert [m["digest"] for m in reg.http.get(f"/v2/mgmt/ref/referrers/{digest}").json()["manifests"]] == [sig]
    assert reg.http.delete(f"/v2/mgmt/ref/manifests/{sig}").status_code == 202
    assert reg.http.get(f"/v2/mgmt/ref/referrers/{digest}").json()["manifests"] == []


def test_deleting_a_blob(reg: Registry):
    """ "Deleting Blobs": 202, then the blob is unknown to the repository (404), and deleting again is 404."""
    digest = reg.push_blob("mgmt/blobs", b"blob to delete")
    r = reg.http.delete(f"/v2/mgmt/blobs/blobs/{digest}")
    assert r.status_code == 202
    gone = reg.http.get(f"/v2/mgmt/blobs/blobs/{digest}")
    assert gone.status_code == 404 and errors(gone) == ["BLOB_UNKNOWN"]
    again = reg.http.delete(f"/v2/mgmt/blobs/blobs/{digest}")
    assert again.status_code == 404 and errors(again) == ["BLOB_UNKNOWN"]


def test_deleting_needs_the_delete_scope(oci_hub: HubProcess, reg: Registry):
    """Content management is authorised separately: a push token gets 403 DENIED."""
    _, digest = reg.push_image("mgmt/guarded", "v1")
    pusher = Registry(oci_hub.url, oci_hub.token("mgmt-pusher", "push:mgmt/*"))
    try:
        for path in (f"/v2/mgmt/guarded/manifests/{digest}", f"/v2/mgmt/guarded/blobs/{sha256(b'layer bytes')}"):
            r = pusher.http.delete(path)
            assert r.status_code == 403 and errors(r) == ["DENIED"]
    finally:
        pusher.close()


def test_storage_is_reclaimed_by_gc_once_nothing_references_it(oci_hub: HubProcess, reg: Registry):
    """After deletes, ``forkd-hub gc`` removes the manifest and the blobs nothing else references, and keeps
    untagged OCI manifests still linked to a repository (index children, referrers)."""
    layer = b"a layer only this image has"
    _, digest = reg.push_image("mgmt/gc", "v1", layer=layer)
    kept_image, kept = reg.push_image("mgmt/gc", "kept", layer=b"kept layer")
    assert reg.http.delete("/v2/mgmt/gc/manifests/kept").status_code == 202  # untagged, still linked
    assert reg.http.delete(f"/v2/mgmt/gc/manifests/{digest}").status_code == 202
    orphan = reg.push_blob("mgmt/gc", b"uploaded, then deleted")
    assert reg.http.delete(f"/v2/mgmt/gc/blobs/{orphan}").status_code == 202
    report = gc(oci_hub)
    assert digest in report["manifests"] and kept not in report["manifests"]
    assert {sha256(layer), orphan} <= set(report["blobs"])
    assert sha256(b"kept layer") not in report["blobs"]
    assert reg.http.get(f"/v2/mgmt/gc/manifests/{kept}").content == kept_image
    assert reg.http.get(f"/v2/mgmt/gc/blobs/{sha256(b'kept layer')}").content == b"kept layer"


def test_crane_deletes_with_its_push_token_when_its_api_token_may_delete(oci_hub: HubProcess, reg: Registry):
    """ "Deleting Manifests" as crane does it: it asks the token endpoint for ``push,pull`` (its read-write scope)
    and gives up on a 403. A Docker ``push`` grants ``delete`` too where the API token holds it, so the delete is
    202; an API token with push alone never deletes: 403 DENIED, whose ``insufficient_scope`` challenge (there for
    oras-py, issue 29) crane ignores, as go-containerregistry reads challenges only on a 401."""
    _, digest = reg.push_image("mgmt/crane", "v1")
    _, other = reg.push_image("mgmt/crane", "v2", layer=b"second layer")
    scopes = ["repository:mgmt/crane:push,pull"]
    deleter = CraneClient(oci_hub.url, "c", oci_hub.token("crane-deleter", "push:mgmt/*", "delete:mgmt/*"), scopes)
    pusher = CraneClient(oci_hub.url, "p", oci_hub.token("crane-pusher", "push:mgmt/*"), scopes)
    try:
        r = deleter.request("DELETE", f"/v2/mgmt/crane/manifests/{digest}")
        assert r.status_code == 202, r.text
        assert reg.http.get(f"/v2/mgmt/crane/manifests/{digest}").status_code == 404
        denied = pusher.request("DELETE", f"/v2/mgmt/crane/manifests/{other}")
        assert denied.status_code == 403 and errors(denied) == ["DENIED"]
        assert challenge_of(denied)["error"] == "insufficient_scope"
        assert pusher.token_requests == [scopes]  # the 403 stays final: no token asked for after it
        assert reg.http.get("/v2/mgmt/crane/manifests/v2").status_code == 200
    finally:
        deleter.close()
        pusher.close()
