"""Interop with a real skopeo (Debian's): copy oci-layout → hub → oci-layout, inspect, list-tags, delete.

skopeo follows the Docker token-auth flow: ``GET /v2/`` → 401 challenge → the token endpoint
with ``--creds`` as Basic auth → bearer token (docs/http-api.md, "Authentication").
"""

from __future__ import annotations

import json
import shutil
import subprocess

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.oci.layout import image_parts, read_layout, write_layout

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is installed by scripts/install-system-deps.sh"),
]


def skopeo(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["skopeo", "--insecure-policy", *args], capture_output=True, text=True, timeout=300, check=check
    )


def tls_off(*flags: str) -> list[str]:
    return [f"--{flag}-tls-verify=false" for flag in flags]


@pytest.fixture(scope="module")
def pushed(oci_hub: HubProcess, admin_token: str, host: str, tmp_path_factory: pytest.TempPathFactory):
    """An image copied into the hub from an oci-layout directory with --dest-creds."""
    src = tmp_path_factory.mktemp("src")
    image = image_parts({"hello.txt": b"hello from an OCI image\n", "bin/tool": bytes(range(256)) * 64})
    write_layout(src, {"v1": image})
    skopeo(
        "copy",
        *tls_off("dest"),
        "--preserve-digests",
        "--dest-creds",
        f"me:{admin_token}",
        f"oci:{src}:v1",
        f"docker://{host}/acme/app:v1",
    )
    return src, image


def test_copy_oci_layout_into_the_hub_and_back_is_byte_identical(pushed, admin_token, host, tmp_path):
    _src, image = pushed
    out = tmp_path / "out"
    skopeo(
        "copy",
        *tls_off("src"),
        "--preserve-digests",
        "--src-creds",
        f"me:{admin_token}",
        f"docker://{host}/acme/app:v1",
        f"oci:{out}:v1",
    )
    manifest, blobs = read_layout(out, "v1")
    assert manifest == image.manifest
    assert {d: blobs[d] for d in image.blobs} == image.blobs


def test_the_hub_serves_the_same_digest_skopeo_pushed(pushed, oci_hub, admin_token):
    _, image = pushed
    r = httpx.get(f"{oci_hub.url}/v2/acme/app/manifests/v1", headers={"Authorization": f"Bearer {admin_token}"})
    assert r.status_code == 200 and r.content == image.manifest
    assert r.headers["Docker-Content-Digest"] == image.digest


def test_inspect_and_list_tags(pushed, admin_token, host):
    _, image = pushed
    creds = ["--creds", f"me:{admin_token}", "--tls-verify=false"]
    raw = skopeo("inspect", "--raw", *creds, f"docker://{host}/acme/app:v1").stdout.encode()
    assert raw.rstrip(b"\n") == image.manifest
    info = json.loads(skopeo("inspect", *creds, f"docker://{host}/acme/app:v1").stdout)
    assert info["Digest"] == image.digest and len(info["Layers"]) == 1
    tags = json.loads(skopeo("list-tags", *creds, f"docker://{host}/acme/app").stdout)
    assert tags == {"Repository": f"{host}/acme/app", "Tags": ["v1"]}


def test_without_credentials_a_private_repository_stays_closed(pushed, host):
    result = skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{host}/acme/app:v1", check=False)
    assert result.returncode != 0
    assert "unauthorized" in result.stderr.lower() or "authentication required" in result.stderr.lower()


def test_a_pull_only_token_cannot_push(oci_hub, pushed, host):
    src, _ = pushed
    reader = oci_hub.token("skopeo-reader", "pull:acme/*")
    result = skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        f"r:{reader}",
        f"oci:{src}:v1",
        f"docker://{host}/acme/other:v1",
        check=False,
    )
    assert result.returncode != 0


def test_delete_removes_the_manifest(oci_hub, admin_token, host, tmp_path):
    src = tmp_path / "src"
    image = image_parts({"gone.txt": b"to be deleted\n"})
    write_layout(src, {"tmp": image})
    creds = ["--creds", f"me:{admin_token}", "--tls-verify=false"]
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        f"me:{admin_token}",
        f"oci:{src}:tmp",
        f"docker://{host}/acme/doomed:tmp",
    )
    skopeo("delete", *creds, f"docker://{host}/acme/doomed:tmp")
    r = httpx.get(
        f"{oci_hub.url}/v2/acme/doomed/manifests/{image.digest}", headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert r.status_code == 404


def test_anonymous_skopeo_pulls_a_public_repository(oci_hub, admin_token, host, tmp_path):
    """Without credentials skopeo follows the challenge to the token endpoint, gets the anonymous token,
    and reads what is public."""
    src = tmp_path / "src"
    image = image_parts({"public.txt": b"anyone may read this\n"})
    write_layout(src, {"v1": image})
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        f"me:{admin_token}",
        f"oci:{src}:v1",
        f"docker://{host}/acme/open:v1",
    )
    r = httpx.patch(
        f"{oci_hub.url}/api/v1/repositories/acme/open",
        json={"public": True},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert r.status_code == 200
    out = tmp_path / "out"
    skopeo("copy", "--src-tls-verify=false", f"docker://{host}/acme/open:v1", f"oci:{out}:v1")
    manifest, blobs = read_layout(out, "v1")
    assert manifest == image.manifest and all(blobs[d] == data for d, data in image.blobs.items())


def test_copy_between_repositories_mounts_the_blobs(pushed, oci_hub, host):
    """skopeo copies from one repository of the hub to another by mounting (``?mount=&from=``): it asks the token
    endpoint for the source's pull scope itself, with a token that may read the source and push the target."""
    token = oci_hub.token("skopeo-mover", "pull:acme/app", "push:acme/moved")
    before = len(oci_hub.requests())
    skopeo(
        "copy",
        *tls_off("src", "dest"),
        "--src-creds",
        f"me:{token}",
        "--dest-creds",
        f"me:{token}",
        f"docker://{host}/acme/app:v1",
        f"docker://{host}/acme/moved:v1",
    )
    requests = oci_hub.requests()[before:]
    assert ("POST", "/v2/acme/moved/blobs/uploads/", 201) in requests  # the layer mounted
    sessions = [r for r in requests if r == ("POST", "/v2/acme/moved/blobs/uploads/", 202)]
    assert len(sessions) <= 1  # at most the config goes up again (skopeo copies it without trying to reuse it)
