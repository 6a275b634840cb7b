"""forkd_client/images/registry.py and auth.py against real registries: a ``forkd-hub serve`` process
(images pushed by skopeo; Docker token auth with the stored ``forkd login``, and anonymous pulls of a
public repository) and Debian's docker-registry with htpasswd (a Basic challenge, credentials from a
containers auth file)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forkd_client.hub.credentials import Credentials
from forkd_client.images import build_rootfs
from forkd_client.images.build import BASE_DIGEST, BASE_NAME
from forkd_client.images.errors import ImageDigestMismatch, ImageNotFound, RegistryAuthFailed
from forkd_client.images.fetch import download, resolve
from forkd_client.images.limits import DEFAULT_LIMITS
from forkd_client.images.reference import parse_image_reference
from forkd_client.images.registry import RegistrySource
from tests.e2e.hubproc import HubProcess, free_port
from tests.forkd_client.images.ocibuild import Entry, layer_tar, write_layout

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo (scripts/install-system-deps.sh)"),
]

LAYERS = [
    layer_tar([Entry.dir("bin"), Entry.file("bin/sh", b"\x7fELF", mode=0o755)]),
    layer_tar([Entry.dir("srv"), Entry.file("srv/data", os.urandom(3 << 20))]),
]


def skopeo_copy(src: str, dest: str, creds: str) -> None:
    result = subprocess.run(
        ["skopeo", "copy", "--dest-tls-verify=false", "--dest-creds", creds, src, dest],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def fetch(text: str, work: Path):
    work.mkdir()
    with RegistrySource(parse_image_reference(text)) as source:
        return download(resolve(source, DEFAULT_LIMITS), work, limits=DEFAULT_LIMITS)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubProcess, str, object, Path]]:
    root = tmp_path_factory.mktemp("images-hub")
    hub = HubProcess(root / "data", root / "serve.log")
    try:
        admin = hub.token("images-admin", "admin")
        info = write_layout(root / "oci", LAYERS, tag="v1", env=["FROM=hub"])
        host = hub.url.removeprefix("http://")
        skopeo_copy(f"oci:{root / 'oci'}:v1", f"docker://{host}/acme/app:v1", f"me:{admin}")
        skopeo_copy(f"oci:{root / 'oci'}:v1", f"docker://{host}/acme/open:v1", f"me:{admin}")
        response = httpx.patch(
            f"{hub.url}/api/v1/repositories/acme/open",
            json={"public": True},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert response.status_code == 200
        yield hub, admin, info, root
    finally:
        hub.stop()


@pytest.fixture(autouse=True)
def no_stored_logins(tmp_path, monkeypatch):
    for name in ("FORKD_TOKEN", "FORKD_HUB_URL", "REGISTRY_AUTH_FILE", "DOCKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_a_private_repository_with_the_stored_forkd_login(hub, tmp_path):
    process, _, info, _ = hub
    host = process.url.removeprefix("http://")
    with pytest.raises(RegistryAuthFailed, match="forkd login"):
        fetch(f"{host}/acme/app:v1", tmp_path / "w0")
    Credentials().login(process.url, process.token("reader", "pull:acme/*"))
    image = fetch(f"{host}/acme/app:v1", tmp_path / "w1")
    assert image.manifest_digest == info.manifest_digest
    assert [layer.digest for layer in image.layers] == info.layer_digests
    assert image.config.env == ["FROM=hub"]
    pinned = fetch(f"{host}/acme/app@{info.manifest_digest}", tmp_path / "w2")
    assert pinned.manifest_digest == info.manifest_digest
    with pytest.raises(ImageNotFound, match="not found"):
        fetch(f"{host}/acme/app:nope", tmp_path / "w3")


def test_forkd_token_goes_only_to_its_own_hub(hub, tmp_path, monkeypatch):
    process, admin, info, _ = hub
    host = process.url.removeprefix("http://")
    monkeypatch.setenv("FORKD_TOKEN", admin)
    monkeypatch.setenv("FORKD_HUB_URL", f"http://127.0.0.1:{free_port()}")  # another hub
    with pytest.raises(RegistryAuthFailed):
        fetch(f"{host}/acme/app:v1", tmp_path / "w0")
    monkeypatch.setenv("FORKD_HUB_URL", process.url)
    assert fetch(f"{host}/acme/app:v1", tmp_path / "w1").manifest_digest == info.manifest_digest


def test_a_public_repository_anonymously(hub, tmp_path):
    process, _, info, _ = hub
    image = fetch(f"{process.url.removeprefix('http://')}/acme/open:v1", tmp_path / "w")
    assert image.manifest_digest == info.manifest_digest


def test_build_rootfs_from_the_hub(hub, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("building a rootfs keeps ownership: needs root")
    process, _, info, _ = hub
    ref = f"{process.url.removeprefix('http://')}/acme/open:v1"
    built = build_rootfs(ref, cache_dir=tmp_path / "cache")
    assert built.annotations == {BASE_DIGEST: info.manifest_digest, BASE_NAME: ref}
    assert built.has_shell and built.env == ["FROM=hub"]
    assert build_rootfs(ref, cache_dir=tmp_path / "cache").cache_hit


# --- docker-registry with htpasswd: the Basic challenge ---------------------------------------------

REGISTRY_CONFIG = """\
version: 0.1
storage:
  filesystem:
    rootdirectory: {root}
http:
  addr: 127.0.0.1:{port}
  secret: forkd-images-test
auth:
  htpasswd:
    realm: forkd-images-test
    path: {htpasswd}
"""


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object, Path]]:
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.skip("needs docker-registry (scripts/install-system-deps.sh)")
    root = tmp_path_factory.mktemp("basic-registry")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # bcrypt through libxcrypt: what docker-registry's htpasswd wants (no extra package)
    (root / "htpasswd").write_text(f"alice:{crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH))}\n")
    port = free_port()
    (root / "config.yml").write_text(
        REGISTRY_CONFIG.format(root=root / "storage", port=port, htpasswd=root / "htpasswd")
    )
    with open(root / "registry.log", "wb") as log:
        proc = subprocess.Popen([exe, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 401:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail("docker-registry did not start")
        info = write_layout(root / "oci", LAYERS, tag="v1", env=["FROM=basic"])
        skopeo_copy(f"oci:{root / 'oci'}:v1", f"docker://127.0.0.1:{port}/team/app:v1", "alice:s3cret")
        yield f"127.0.0.1:{port}", info, root
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_basic_challenge_with_an_auth_file(basic_registry, tmp_path, monkeypatch):
    host, info, _ = basic_registry
    with pytest.raises(RegistryAuthFailed, match="user name and password"):
        fetch(f"{host}/team/app:v1", tmp_path / "w0")
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(b"alice:wrong").decode()}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))
    with pytest.raises(RegistryAuthFailed, match="refused"):
        fetch(f"{host}/team/app:v1", tmp_path / "w1")
    auth.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(b"alice:s3cret").decode()}}}))
    image = fetch(f"{host}/team/app:v1", tmp_path / "w2")
    assert image.manifest_digest == info.manifest_digest and image.config.env == ["FROM=basic"]


def test_a_registry_serving_altered_bytes_is_caught(basic_registry, tmp_path, monkeypatch):
    host, info, root = basic_registry
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "auth.json"))
    (tmp_path / "auth.json").write_text(
        json.dumps({"auths": {host: {"auth": base64.b64encode(b"alice:s3cret").decode()}}})
    )
    hexpart = info.layer_digests[1].removeprefix("sha256:")
    data = next((root / "storage").rglob(f"blobs/sha256/{hexpart[:2]}/{hexpart}/data"))
    original = data.read_bytes()
    try:
        data.write_bytes(original[:-10] + bytes(10))
        with pytest.raises(ImageDigestMismatch, match=info.layer_digests[1]):
            fetch(f"{host}/team/app:v1", tmp_path / "w")
        assert [p.name for p in (tmp_path / "w").iterdir()] == [info.layer_digests[0].replace(":", "-")]
    finally:
        data.write_bytes(original)
