"""Interop with a real podman (Debian's): push an image to the hub, push it again to another repository (its
layer is mounted from the first: containers/image asks for the source's pull scope and POSTs ``?mount=&from=``),
and pull it back with the same digest.

podman runs with its own ``--root``/``--runroot`` (vfs driver) under the test's temporary directory, so it
touches nothing of the host's container storage.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.oci.layout import image_parts, write_layout

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is installed by scripts/install-system-deps.sh"),
]


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    runroot = Path(tempfile.mkdtemp(prefix="podman-", dir="/tmp"))  # podman wants a runroot under 50 characters
    (tmp_path / "run").mkdir()
    env = {"HOME": str(tmp_path), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    storage = ["--root", str(tmp_path / "storage"), "--runroot", str(runroot), "--storage-driver", "vfs"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["podman", *storage, *args], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    try:
        yield run
    finally:
        shutil.rmtree(runroot, ignore_errors=True)


def test_push_mount_and_pull(podman, oci_hub: HubProcess, admin_token: str, host: str, tmp_path: Path):
    src = tmp_path / "src"
    image = image_parts({"hello.txt": b"hello from podman\n", "bin/tool": bytes(range(256)) * 32})
    write_layout(src, {"v1": image})
    podman("pull", f"oci:{src}:v1")
    local = f"localhost{src}:latest"  # podman names an image pulled from a layout after its path
    creds = ["--tls-verify=false", "--creds", f"me:{admin_token}"]
    podman("push", *creds, local, f"docker://{host}/podman/app:v1")
    before = len(oci_hub.requests())
    podman("push", *creds, local, f"docker://{host}/podman/copy:v1")
    second = oci_hub.requests()[before:]
    # the layer is mounted from podman/app, not uploaded again
    assert ("POST", "/v2/podman/copy/blobs/uploads/", 201) in second
    uploads = [r for r in second if r[0] == "POST" and r[1] == "/v2/podman/copy/blobs/uploads/" and r[2] == 202]
    assert len(uploads) <= 1  # at most the config (which podman's cache does not place), never the layer
    podman("rmi", "--all")
    podman("pull", *creds, f"{host}/podman/copy:v1")
    inspected = json.loads(podman("image", "inspect", f"{host}/podman/copy:v1").stdout)[0]
    served = httpx.head(
        f"{oci_hub.url}/v2/podman/copy/manifests/v1", headers={"Authorization": f"Bearer {admin_token}"}
    ).headers["Docker-Content-Digest"]
    assert inspected["Digest"] == served
