"""OCI distribution-spec 1.1, workflow category **Push**, against a real ``forkd-hub serve``.

Clauses: "Pushing a blob monolithically" (POST then PUT, single POST), "Pushing a blob in chunks",
"Mounting a blob from another repository", "Pushing Manifests" (and "Pushing Manifests with
Subject"), endpoints end-4a … end-7, end-11, end-13; image-spec for manifest, index, artifact
and descriptor rules.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.oci.layout import EMPTY_JSON, OCI_CONFIG, OCI_INDEX, OCI_LAYER, OCI_MANIFEST, descriptor, dumps, sha256
from tests.e2e.oci.registry_client import Registry, digest_of, errors
from tests.e2e.oci.tokenflow import SuiteClient, anonymous_status, registry_token

pytestmark = pytest.mark.slow

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


@pytest.fixture(scope="module")
def reg(oci_hub: HubProcess, admin_token: str) -> Iterator[Registry]:
    client = Registry(oci_hub.url, admin_token)
    yield client
    client.close()


def start(reg: Registry, repo: str) -> str:
    r = reg.http.post(f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"})
    assert r.status_code == 202 and r.headers["Location"].startswith(f"/v2/{repo}/blobs/uploads/")
    return r.headers["Location"]


def test_post_then_put(reg: Registry):
    """ "POST then PUT": 202 with a Location holding a session id, then 201 with a pullable Location."""
    data = b"monolithic"
    location = start(reg, "push/mono")
    r = reg.http.put(location, params={"digest": sha256(data)}, content=data)
    assert r.status_code == 201 and r.headers["Location"] == f"/v2/push/mono/blobs/{sha256(data)}"
    assert reg.http.get(r.headers["Location"]).content == data


def test_single_post(reg: Registry):
    """ "Single POST" (end-4b): POST ?digest= with the body gives 201 and a pullable Location."""
    data = b"single post"
    r = reg.http.post("/v2/push/single/blobs/uploads/", params={"digest": sha256(data)}, content=data)
    assert r.status_code == 201 and reg.http.get(r.headers["Location"]).content == data


def test_a_wrong_digest_is_refused(reg: Registry):
    """end-6 failure 400 (DIGEST_INVALID, code-4): the bytes do not hash to the digest given."""
    location = start(reg, "push/bad")
    r = reg.http.put(location, params={"digest": sha256(b"other")}, content=b"these bytes")
    assert r.status_code == 400 and errors(r) == ["DIGEST_INVALID"]


def test_chunks_in_order_then_the_last_one_in_the_closing_put(reg: Registry):
    """ "Pushing a blob in chunks": PATCH with Content-Range → 202 and Location; the final chunk MAY come in
    the closing PUT (with its Content-Range); end-13 GET reports the offset with 204 and Range."""
    data = bytes(range(256)) * 40
    location = start(reg, "push/chunked")
    r = reg.http.patch(
        location, content=data[:4000], headers={"Content-Range": "0-3999", "Content-Type": "application/octet-stream"}
    )
    assert r.status_code == 202 and r.headers["Range"] == "0-3999"
    status = reg.http.get(r.headers["Location"])
    assert status.status_code == 204 and status.headers["Range"] == "0-3999"
    done = reg.http.put(
        r.headers["Location"],
        params={"digest": sha256(data)},
        content=data[4000:],
        headers={"Content-Range": f"4000-{len(data) - 1}"},
    )
    assert done.status_code == 201
    assert reg.http.get(f"/v2/push/chunked/blobs/{sha256(data)}").content == data


def test_out_of_order_chunks_are_416_and_the_session_is_kept(reg: Registry):
    """ "Pushing a blob in chunks": a chunk out of order MUST be 416; so is a closing PUT whose Content-Range
    does not start at the offset, and the session stays usable."""
    data = b"a" * 100 + b"b" * 100
    location = start(reg, "push/order")
    assert reg.http.patch(location, content=data[:100], headers={"Content-Range": "0-99"}).status_code == 202
    skipped = reg.http.patch(location, content=data[150:], headers={"Content-Range": "150-199"})
    assert skipped.status_code == 416 and skipped.headers["Range"] == "0-99"
    wrong_put = reg.http.put(
        location, params={"digest": sha256(data)}, content=data[50:], headers={"Content-Range": "50-199"}
    )
    assert wrong_put.status_code == 416 and wrong_put.headers["Range"] == "0-99"
    assert reg.http.get(location).headers["Range"] == "0-99"
    done = reg.http.put(
        location, params={"digest": sha256(data)}, content=data[100:], headers={"Content-Range": "100-199"}
    )
    assert done.status_code == 201


def test_streamed_chunk_without_content_length(reg: Registry):
    """ "Pushing a blob in chunks" as docker/containerd stream it: one PATCH, chunked transfer encoding."""
    parts = [b"x" * 65536, b"y" * 1000, b"z"]
    data = b"".join(parts)
    location = start(reg, "push/stream")
    r = reg.http.patch(location, content=iter(parts))
    assert r.status_code == 202 and r.headers["Range"] == f"0-{len(data) - 1}"
    assert reg.http.put(r.headers["Location"], params={"digest": sha256(data)}).status_code == 201


def test_mount_from_another_repository(reg: Registry):
    """ "Mounting a blob from another repository" (end-11): 201 and Location when the caller can read it."""
    digest = reg.push_blob("push/source", b"shared layer")
    r = reg.http.post("/v2/push/target/blobs/uploads/", params={"mount": digest, "from": "push/source"})
    assert r.status_code == 201 and r.headers["Location"] == f"/v2/push/target/blobs/{digest}"
    assert reg.http.get(r.headers["Location"]).content == b"shared layer"


def test_mount_without_from_and_the_fallback_to_an_upload(oci_hub: HubProcess, reg: Registry):
    """end-11 without ``from``: the hub looks in repositories the caller can read; when it cannot mount,
    it answers 202 with an upload session, as the clause says."""
    digest = reg.push_blob("push/hidden", b"only in push/hidden")
    r = reg.http.post("/v2/push/auto/blobs/uploads/", params={"mount": digest})
    assert r.status_code == 201
    outsider = Registry(oci_hub.url, oci_hub.token("mount-outsider", "push:other/*"))
    try:
        r = outsider.http.post("/v2/other/x/blobs/uploads/", params={"mount": digest, "from": "push/hidden"})
        assert r.status_code == 202 and "/blobs/uploads/" in r.headers["Location"]
        r = outsider.http.post("/v2/other/x/blobs/uploads/", params={"mount": digest})
        assert r.status_code == 202
    finally:
        outsider.close()


def test_pushing_an_image_manifest(reg: Registry):
    """ "Pushing Manifests": 201 with a pullable Location; the exact bytes are served back."""
    body, digest = reg.push_image("push/image", "v1")
    r = reg.http.get(f"/v2/push/image/manifests/{digest}")
    assert r.content == body and r.headers["Content-Type"] == OCI_MANIFEST


def test_a_manifest_referencing_missing_blobs_is_refused(reg: Registry):
    """ "Push": a registry MAY reject a manifest whose blobs are not uploaded (MANIFEST_BLOB_UNKNOWN); blobs of
    another repository count only once mounted."""
    config = dumps({"os": "linux"})
    layer = b"in another repository"
    reg.push_blob("push/elsewhere", layer)
    reg.push_blob("push/strict", config)
    body = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": descriptor(OCI_CONFIG, config),
            "layers": [descriptor(OCI_LAYER, layer)],
        }
    )
    r = reg.put_manifest("push/strict", "v1", body)
    assert r.status_code == 400 and errors(r) == ["MANIFEST_BLOB_UNKNOWN"]
    assert json.loads(r.content)["errors"][0]["detail"]["blobs"] == [sha256(layer)]
    reg.http.post("/v2/push/strict/blobs/uploads/", params={"mount": sha256(layer), "from": "push/elsewhere"})
    assert reg.put_manifest("push/strict", "v1", body).status_code == 201


def test_a_descriptor_with_the_wrong_size_is_refused(reg: Registry):
    """image-spec descriptor "size": it MUST be the blob's size (SIZE_INVALID)."""
    config = dumps({"os": "linux"})
    reg.push_blob("push/size", config)
    wrong = {**descriptor(OCI_CONFIG, config), "size": len(config) + 1}
    r = reg.put_manifest(
        "push/size", "v1", dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": wrong, "layers": []})
    )
    assert r.status_code == 400 and errors(r) == ["SIZE_INVALID"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schemaVersion": 1}, "schemaVersion"),
        ({"config": {"mediaType": OCI_CONFIG, "digest": "sha256:xyz", "size": 2}}, "config"),
        ({"layers": "nope"}, "layers"),
        ({"annotations": {"a": 1}}, "manifest"),
        ({"artifactType": "not a media type"}, "manifest"),
    ],
)
def test_structurally_invalid_manifests_are_refused(reg: Registry, change, field):
    """end-7 failure (MANIFEST_INVALID, code-6) naming the field, for image-spec structure errors."""
    reg.push_blob("push/invalid", b"{}")
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(EMPTY_JSON, b"{}"),
        "layers": [],
        **change,
    }
    r = reg.put_manifest("push/invalid", "v1", dumps(manifest))
    assert r.status_code == 400 and errors(r) == ["MANIFEST_INVALID"]
    assert json.loads(r.content)["errors"][0]["detail"]["field"] == field


def test_a_content_type_that_contradicts_the_media_type_is_refused(reg: Registry):
    """ "Pushing Manifests": Content-Type is the manifest's media type; a different one is MANIFEST_INVALID."""
    body, _ = reg.push_image("push/ctype", "v1")
    r = reg.put_manifest("push/ctype", "v2", body, media_type=OCI_INDEX)
    assert r.status_code == 400 and errors(r) == ["MANIFEST_INVALID"]


def test_an_artifact_with_empty_config_data_field_and_custom_fields_is_kept_byte_exact(reg: Registry):
    """image-spec "Guidelines for Artifact Usage": artifactType, the empty descriptor with ``data``; unknown
    fields and formatting are kept (the digest is over the exact bytes)."""
    reg.push_blob("push/artifact", b"{}")
    payload = b"sbom"
    reg.push_blob("push/artifact", payload)
    body = (
        b'{ "schemaVersion": 2,\n  "mediaType": "' + OCI_MANIFEST.encode() + b'",\n'
        b'  "artifactType": "application/vnd.example.sbom.v1",\n'
        b'  "config": {"mediaType": "'
        + EMPTY_JSON.encode()
        + b'", "digest": "'
        + sha256(b"{}").encode()
        + b'", "size": 2, "data": "e30="},\n'
        b'  "layers": [{"mediaType": "text/plain", "digest": "' + sha256(payload).encode() + b'", "size": 4,'
        b' "data": "' + base64.b64encode(payload) + b'", "x-custom": {"kept": [1, 2.50, "\\u00e9"]}}],\n'
        b'  "x-vendor-field": "stays"\n}\n'
    )
    r = reg.put_manifest("push/artifact", "sbom", body)
    assert r.status_code == 201 and r.headers["Docker-Content-Digest"] == sha256(body)
    assert reg.http.get("/v2/push/artifact/manifests/sbom").content == body


def test_a_data_field_that_does_not_match_is_refused(reg: Registry):
    """image-spec descriptor "data": its decoded bytes MUST match the digest and size."""
    reg.push_blob("push/data", b"{}")
    config = {**descriptor(EMPTY_JSON, b"{}"), "data": base64.b64encode(b"[]").decode()}
    r = reg.put_manifest(
        "push/data", "v1", dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": []})
    )
    assert r.status_code == 400 and errors(r) == ["MANIFEST_INVALID"]


def test_nested_image_indexes(reg: Registry):
    """image-spec "Image Index": manifests MAY be indexes; every child MUST be in the repository first."""
    amd, _ = reg.push_image("push/multi", "amd", layer=b"amd64 layer")
    arm, _ = reg.push_image("push/multi", "arm", layer=b"arm64 layer")
    inner = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                descriptor(OCI_MANIFEST, amd, platform={"architecture": "amd64", "os": "linux"}),
                descriptor(OCI_MANIFEST, arm, platform={"architecture": "arm64", "os": "linux"}),
            ],
        }
    )
    assert reg.put_manifest("push/multi", sha256(inner), inner, OCI_INDEX).status_code == 201
    outer = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [descriptor(OCI_INDEX, inner)],
            "annotations": {"org.example.nested": "yes"},
        }
    )
    r = reg.put_manifest("push/multi", "latest", outer, OCI_INDEX)
    assert r.status_code == 201
    got = reg.http.get("/v2/push/multi/manifests/latest")
    assert got.content == outer and got.headers["Content-Type"] == OCI_INDEX
    dangling = dumps(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [descriptor(OCI_MANIFEST, b'{"not": "pushed"}')]}
    )
    r = reg.put_manifest("push/multi", "dangling", dangling, OCI_INDEX)
    assert r.status_code == 400 and errors(r) == ["MANIFEST_BLOB_UNKNOWN"]


def test_docker_schema2_manifest_and_manifest_list(reg: Registry):
    """Docker Image Manifest V2 Schema 2 and manifest lists are accepted like their OCI equivalents."""
    config = dumps({"architecture": "amd64", "os": "linux"})
    layer = b"docker layer"
    reg.push_blob("push/docker", config)
    reg.push_blob("push/docker", layer)
    manifest = dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": descriptor(DOCKER_CONFIG, config),
            "layers": [descriptor(DOCKER_LAYER, layer)],
        }
    )
    assert reg.put_manifest("push/docker", "v1", manifest, DOCKER_MANIFEST).status_code == 201
    listing = dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_LIST,
            "manifests": [descriptor(DOCKER_MANIFEST, manifest, platform={"architecture": "amd64", "os": "linux"})],
        }
    )
    assert reg.put_manifest("push/docker", "multi", listing, DOCKER_LIST).status_code == 201
    got = reg.http.get("/v2/push/docker/manifests/multi")
    assert got.content == listing and got.headers["Content-Type"] == DOCKER_LIST
    assert reg.http.get("/v2/push/docker/manifests/v1").headers["Content-Type"] == DOCKER_MANIFEST


def test_docker_schema1_is_unsupported(reg: Registry):
    """Docker schema 1 (signed JSON) is not stored: UNSUPPORTED (code-14)."""
    body = dumps({"schemaVersion": 1, "name": "push/old", "tag": "v1", "fsLayers": []})
    r = reg.put_manifest("push/old", "v1", body, "application/vnd.docker.distribution.manifest.v1+prettyjws")
    assert r.status_code == 400 and errors(r) == ["UNSUPPORTED"]


def test_manifests_of_4_mib_are_accepted(reg: Registry):
    """ "Pushing Manifests": registries SHOULD accept manifests of at least 4 MiB."""
    reg.push_blob("push/big", b"{}")
    # the bulk is layer descriptors (annotations are bounded far below 4 MiB, docs/limits.md); the last bytes
    # an annotation, so the body is exactly 4 MiB
    layer = descriptor("application/vnd.oci.image.layer.v1.tar", b"{}")
    base = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(EMPTY_JSON, b"{}"),
        "layers": [],
        "annotations": {"filler": ""},
    }
    count = ((4 << 20) - len(dumps(base)) - 4096) // (len(dumps(layer)) + 1)
    base["layers"] = [layer] * count
    filler = (4 << 20) - len(dumps(base))
    body = dumps({**base, "annotations": {"filler": "f" * filler}})
    assert len(body) == 4 << 20
    assert reg.put_manifest("push/big", "v1", body).status_code == 201
    assert reg.http.get("/v2/push/big/manifests/v1").content == body


def test_a_manifest_with_a_subject_answers_oci_subject(reg: Registry):
    """ "Pushing Manifests with Subject": the registry MUST answer ``OCI-Subject: <subject digest>``, and MUST
    accept a subject that does not exist (yet)."""
    image, digest = reg.push_image("push/signed", "v1")
    reg.push_artifact(
        "push/signed", "sig", "application/vnd.example.signature", subject=descriptor(OCI_MANIFEST, image)
    )
    reg.push_blob("push/signed", b"{}")
    ghost = {"mediaType": OCI_MANIFEST, "digest": sha256(b"not here"), "size": 8}
    body = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": "application/vnd.example.x",
            "config": descriptor(EMPTY_JSON, b"{}"),
            "layers": [],
            "subject": ghost,
        }
    )
    r = reg.put_manifest("push/signed", sha256(body), body)
    assert r.status_code == 201 and r.headers["OCI-Subject"] == ghost["digest"]
    again = reg.put_manifest("push/signed", "sig2", body)
    assert again.headers["OCI-Subject"] == ghost["digest"] and digest != ghost["digest"]


# -- through the token flow, as the conformance suite and crane authenticate (tests/e2e/oci/tokenflow.py) --


def test_the_openers_pull_token_reads_and_cancels_its_upload(oci_hub: HubProcess):
    """end-13 as the conformance suite does it: after a 416 on an out-of-order PATCH it GETs the upload's
    Location with the pull token it cached for the repository (it re-authenticates only after a 401). The
    session's opener may read and cancel it with pull; a reader of the repository never sees another
    client's upload (404 BLOB_UPLOAD_UNKNOWN), nor can it cancel it."""
    writer = SuiteClient(oci_hub.url, "ci", oci_hub.token("flow-uploader", "push:flow/*"))
    reader = SuiteClient(oci_hub.url, "r", oci_hub.token("flow-reader", "pull:flow/*"))
    try:
        assert writer.request("GET", "/v2/flow/up/tags/list").status_code == 404  # a pull token is cached now
        assert writer.token_requests == [["repository:flow/up:pull"]]
        start = writer.request("POST", "/v2/flow/up/blobs/uploads/", headers={"Content-Length": "0"})
        assert start.status_code == 202
        location = start.headers["Location"]
        data = b"c" * 200
        assert (
            writer.request("PATCH", location, content=data[:100], headers={"Content-Range": "0-99"}).status_code == 202
        )
        skipped = writer.request("PATCH", location, content=data[150:], headers={"Content-Range": "150-199"})
        assert skipped.status_code == 416 and skipped.headers["Range"] == "0-99"
        status = writer.request("GET", location)  # with the cached pull token
        assert status.status_code == 204, status.text
        assert status.headers["Range"] == "0-99" and status.headers["Upload-Offset"] == "100"
        for method in ("GET", "DELETE"):
            peek = reader.request(method, location)
            assert peek.status_code == 404 and errors(peek) == ["BLOB_UPLOAD_UNKNOWN"], (method, peek.text)
        assert anonymous_status(oci_hub.url, "GET", location) == 401
        pull_only = registry_token(oci_hub.url, "ci", writer.auth[1], "repository:flow/up:pull")
        cancel = httpx.delete(f"{oci_hub.url}{location}", headers={"Authorization": f"Bearer {pull_only}"})
        assert cancel.status_code == 204, cancel.text
        gone = writer.request("GET", location)
        assert gone.status_code == 404 and errors(gone) == ["BLOB_UPLOAD_UNKNOWN"]
    finally:
        writer.close()
        reader.close()


def test_a_mount_through_the_token_flow_names_the_source_and_mounts(oci_hub: HubProcess, reg: Registry):
    """end-11 through the token flow: the 401 of a mount names the source's pull scope too (as distribution's
    challenge does), so the token the client asks for next reads the source and the blob is mounted (201), both
    for a client without a token and for one holding a push token for the target only."""
    digest = reg.push_blob("flow/src", b"a layer to mount")
    user = oci_hub.token("flow-mounter", "push:flow/*")
    fresh = SuiteClient(oci_hub.url, "m", user)
    holding = SuiteClient(oci_hub.url, "m", user)
    try:
        r = fresh.request("POST", "/v2/flow/dst1/blobs/uploads/", params={"mount": digest, "from": "flow/src"})
        assert fresh.token_requests == [["repository:flow/dst1:pull,push repository:flow/src:pull"]]
        assert r.status_code == 201 and r.headers["Location"] == f"/v2/flow/dst1/blobs/{digest}"
        assert reg.http.get(f"/v2/flow/dst1/blobs/{digest}").content == b"a layer to mount"
        assert holding.request("POST", "/v2/flow/dst2/blobs/uploads/").status_code == 202  # caches a push token
        r = holding.request("POST", "/v2/flow/dst2/blobs/uploads/", params={"mount": digest, "from": "flow/src"})
        assert r.status_code == 201, r.text
        assert holding.token_requests[-1] == ["repository:flow/dst2:pull,push repository:flow/src:pull"]
    finally:
        fresh.close()
        holding.close()


def test_a_mount_from_a_source_no_token_could_read_falls_back_to_an_upload(oci_hub: HubProcess, reg: Registry):
    """end-11: what the caller's API token cannot read is never challenged for (no loop, nothing learnt about
    the source): 202 and an upload session, as for a missing blob."""
    digest = reg.push_blob("flow/hidden", b"not for this token")
    outsider = SuiteClient(oci_hub.url, "o", oci_hub.token("flow-outsider", "push:flow/dst3"))
    try:
        r = outsider.request("POST", "/v2/flow/dst3/blobs/uploads/", params={"mount": digest, "from": "flow/hidden"})
        assert r.status_code == 202 and "/blobs/uploads/" in r.headers["Location"]
        assert len(outsider.token_requests) == 1
    finally:
        outsider.close()


def test_a_tag_push_digests_with_sha256_and_tag_parameters_are_ignored(reg: Registry):
    """ "Pushing Manifests": a manifest PUT by tag is addressed by its sha256 (``Docker-Content-Digest``) whatever
    its content's algorithms; the ``tag`` query parameters of a push by digest (a MAY) are not supported: the
    push succeeds, answers no ``OCI-Tag``, and creates no tag (docs/http-api.md, "OCI conformance")."""
    reg.push_blob("flow/sha512", b"{}", "sha512")
    manifest = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": EMPTY_JSON, "digest": digest_of(b"{}", "sha512"), "size": 2},
            "layers": [],
        }
    )
    by_digest = reg.http.put(
        f"/v2/flow/sha512/manifests/{digest_of(manifest, 'sha512')}",
        params={"tag": "v1"},
        content=manifest,
        headers={"Content-Type": OCI_MANIFEST},
    )
    assert by_digest.status_code == 201 and "OCI-Tag" not in by_digest.headers
    assert by_digest.headers["Docker-Content-Digest"] == digest_of(manifest, "sha512")
    assert reg.http.get("/v2/flow/sha512/tags/list").json()["tags"] == []
    by_tag = reg.put_manifest("flow/sha512", "v1", manifest)
    assert by_tag.status_code == 201 and by_tag.headers["Docker-Content-Digest"] == sha256(manifest)
    for ref in ("v1", sha256(manifest), digest_of(manifest, "sha512")):
        assert reg.http.get(f"/v2/flow/sha512/manifests/{ref}").content == manifest
