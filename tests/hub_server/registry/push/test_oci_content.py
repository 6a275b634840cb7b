"""Generic OCI content through the registry services, on SQLite and PostgreSQL: the structural checks
(``registry.oci_content``), the presence checks (``registry.oci_plan``), sha512 digests, referrers and
what GC keeps. The wire-level conformance suite is tests/e2e/oci."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta

import pytest

from hub_server.errors import HubError
from hub_server.registry.push.oci_content import is_forkd_document, parse_oci_document
from manifest import mediatypes as mt
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error

EMPTY = "application/vnd.oci.empty.v1+json"


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def digest(data: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def desc(media_type: str, content: bytes, algorithm: str = "sha256", **extra: object) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest(content, algorithm), "size": len(content), **extra}


def upload(hub: Hub, token: str, repo: str, data: bytes, algorithm: str = "sha256") -> str:
    d = digest(data, algorithm)
    r = hub.client.post(f"/v2/{repo}/blobs/uploads/", params={"digest": d}, content=data, headers=auth(token))
    assert r.status_code == 201, r.text
    return d


def artifact(subject: dict[str, object] | None = None, algorithm: str = "sha256", **fields: object) -> bytes:
    body: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "artifactType": "application/vnd.example.sig",
        "config": desc(EMPTY, b"{}", algorithm),
        "layers": [],
        **fields,
    }
    if subject is not None:
        body["subject"] = subject
    return dumps(body)


def test_dispatch_sends_only_forkd_media_types_to_the_forkd_verifier():
    assert is_forkd_document({"artifactType": mt.LAYER_ARTIFACT})
    assert is_forkd_document({"artifactType": mt.CHAIN_ARTIFACT})
    assert is_forkd_document({"config": {"mediaType": mt.CONFIG}})
    assert not is_forkd_document({"artifactType": "application/vnd.example.sig", "config": {"mediaType": EMPTY}})
    assert not is_forkd_document({"mediaType": mt.OCI_INDEX, "manifests": []})


def test_structure_errors_name_the_field():
    good = json.loads(artifact())
    doc = parse_oci_document(good, mt.OCI_MANIFEST)
    assert doc.artifact_type == "application/vnd.example.sig" and doc.config is not None and doc.layers == ()
    image = {k: v for k, v in good.items() if k != "artifactType"}
    assert parse_oci_document(image, None).artifact_type == EMPTY  # the config's media type stands in
    for change, field in [
        ({"config": {**good["config"], "size": -1}}, "config"),
        ({"layers": [{"mediaType": "x", "digest": digest(b"a"), "size": 1}]}, "layers[0]"),
        ({"layers": [desc("a/b", b"x", urls="not a list")]}, "layers[0]"),
        ({"subject": "sha256:abc"}, "subject"),
        ({"config": desc(EMPTY, b"{}", data=base64.b64encode(b"{ }").decode())}, "config"),
    ]:
        with pytest.raises(HubError) as info:
            parse_oci_document({**good, **change}, None)
        assert info.value.code == "MANIFEST_INVALID" and info.value.detail["field"] == field, change
    with pytest.raises(HubError) as missing:
        parse_oci_document({k: v for k, v in good.items() if k != "mediaType"}, "application/json")
    assert missing.value.detail["field"] == "mediaType"


def test_sha512_blobs_manifests_and_referrers(hub: Hub, admin_token: str):
    """sha512 digests fit every digest column (PostgreSQL's are 144 characters since revision 0004)."""
    upload(hub, admin_token, "acme/sha", b"{}", "sha512")
    subject = {"mediaType": mt.OCI_MANIFEST, "digest": digest(b"subject", "sha512"), "size": 7}
    body = artifact(subject, "sha512")
    ref = digest(body, "sha512")
    r = hub.client.put(
        f"/v2/acme/sha/manifests/{ref}", content=body, headers={**auth(admin_token), "Content-Type": mt.OCI_MANIFEST}
    )
    assert r.status_code == 201 and r.headers["OCI-Subject"] == subject["digest"]
    assert hub.client.get(f"/v2/acme/sha/manifests/{ref}", headers=auth(admin_token)).content == body
    listed = hub.client.get(f"/v2/acme/sha/referrers/{subject['digest']}", headers=auth(admin_token)).json()
    assert [m["digest"] for m in listed["manifests"]] == [ref]


def test_a_tag_push_of_generic_content_is_addressed_by_sha256(hub: Hub, admin_token: str):
    upload(hub, admin_token, "acme/art", b"{}")
    body = artifact()
    r = hub.client.put("/v2/acme/art/manifests/v1", content=body, headers=auth(admin_token))
    assert r.status_code == 201 and r.headers["Docker-Content-Digest"] == digest(body)
    assert "OCI-Subject" not in r.headers


def test_blobs_must_be_in_this_repository(hub: Hub, admin_token: str):
    upload(hub, admin_token, "acme/one", b"{}")
    r = hub.client.put("/v2/acme/two/manifests/v1", content=artifact(), headers=auth(admin_token))
    assert expect_error(r, 400, "MANIFEST_BLOB_UNKNOWN") == {"blobs": [digest(b"{}")]}


def test_gc_keeps_linked_generic_manifests_and_collects_deleted_ones(hub: Hub, admin_token: str):
    upload(hub, admin_token, "acme/gc", b"{}")
    kept, dropped = artifact(annotations={"n": "1"}), artifact(annotations={"n": "2"})
    for body in (kept, dropped):
        assert (
            hub.client.put(f"/v2/acme/gc/manifests/{digest(body)}", content=body, headers=auth(admin_token)).status_code
            == 201
        )
    assert hub.client.delete(f"/v2/acme/gc/manifests/{digest(dropped)}", headers=auth(admin_token)).status_code == 202
    report = hub.call(hub.registry.gc.run, grace=timedelta(0))
    assert report.manifests == [digest(dropped)] and digest(b"{}") not in report.blobs
    assert hub.client.get(f"/v2/acme/gc/manifests/{digest(kept)}", headers=auth(admin_token)).content == kept
