"""A snapshot's rootfs path on its way between hosts (issue 29, items 6, 7 and 9): a real hub process, the
forkd CLI in separate stores standing for separate hosts, forkd's own pull flow (``pull --hub``).

- a path into this host's store (where ``unpack`` falls back) never leaves it: ``pack`` writes
  ``/var/cache/forkd/<sha16>.ext4`` as ``target_path``, a push records that name in the layer config;
- a push of a snapshot whose rootfs is outside its directory says the image is not uploaded, our pull
  says the image is missing on this host, and the hub's forkd pack declares it (``[rootfs]``) so that
  forkd's pull warns about the missing sidecar too;
- a forkd v1 pack that carries ``rootfs.ext4`` and names no ``rootfs`` is unpacked without one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from manifest.forkd_pack import PackLink, write_pack
from manifest.forkd_unpack import read_pack_manifest
from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.logscan import assert_no_traceback
from tests.forkd_client.snapshots import make_base_source


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0


def host(tmp_path: Path, name: str, hub: HubProcess) -> dict[str, str]:
    """The environment of a forkd CLI on its own "host": its store, its config, no allowed rootfs
    directory besides the store's own ``rootfs/`` (never the real /var/cache/forkd)."""
    root = tmp_path / name
    return {
        **os.environ,
        "FORKD_HOME": str(root / "home"),
        "XDG_CONFIG_HOME": str(root / "cfg"),
        "FORKD_HUB_URL": hub.url,
        "FORKD_ROOTFS_DIRS": "",
    }


def run(env: dict[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(forkd(*args), env=env, capture_output=True, text=True, input=input, timeout=300)
    assert_no_traceback(result.stdout + result.stderr, f"forkd {' '.join(args)}")
    assert result.returncode == 0, (args, result.stderr)
    return result


def snapshot_json(env: dict[str, str], tag: str) -> dict:
    return json.loads((Path(env["FORKD_HOME"]) / "snapshots" / tag / "snapshot.json").read_text())


def test_a_fallback_rootfs_path_never_travels_and_a_missing_image_is_said(hub: HubProcess, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src", rootfs=True)
    sha = hashlib.sha256((src / "rootfs.ext4").read_bytes()).hexdigest()
    portable = f"/var/cache/forkd/{sha[:16]}.ext4"  # the name every host gives that image

    # host A packs a snapshot with its own rootfs.ext4: the image travels as forkd's sidecar
    a = host(tmp_path, "a", hub)
    run(a, "import", str(src), "py")
    (tmp_path / "from-a").mkdir()
    run(a, "pack", "py", "-o", str(tmp_path / "from-a" / "py.forkd-snapshot.tar.zst"))

    # host B unpacks it: /var/cache/forkd is not allowed here, so the image falls back into B's store
    b = host(tmp_path, "b", hub)
    run(b, "unpack", str(tmp_path / "from-a" / "py.forkd-snapshot.tar.zst"))
    fallback = Path(b["FORKD_HOME"]) / "rootfs" / f"{sha[:16]}.ext4"
    assert snapshot_json(b, "py")["rootfs"] == str(fallback) and fallback.is_file()

    # B's pack names the portable path, never B's store (decision 0006 item 4)
    (tmp_path / "from-b").mkdir()
    run(b, "pack", "py", "-o", str(tmp_path / "from-b" / "py.forkd-snapshot.tar.zst"))
    declared = read_pack_manifest(tmp_path / "from-b" / "py.forkd-snapshot.tar.zst")
    assert declared.rootfs is not None and declared.rootfs["target_path"] == portable

    # B's push says the image is not uploaded; the layer config records the portable path
    run(b, "login", hub.url, "--token-stdin", input=hub.token("ci", "push:acme/*") + "\n")
    pushed = run(b, "push", "py", "acme/py:v1", "--public", "--json")
    assert "is not uploaded" in pushed.stderr and portable in pushed.stderr, pushed.stderr
    assert any(str(fallback) in w for w in json.loads(pushed.stdout)["warnings"])

    # host C pulls: its snapshot names the portable path (not B's store) and the pull says the image is missing
    c = host(tmp_path, "c", hub)
    run(c, "login", hub.url, "--token-stdin", input=hub.token("c", "pull:acme/*") + "\n")
    pulled = run(c, "pull", "acme/py:v1", "--as", "py")
    assert snapshot_json(c, "py")["rootfs"] == portable
    assert "is not on this host" in pulled.stderr and portable in pulled.stderr, pulled.stderr

    # forkd's own pull: the hub's pack declares the image ([rootfs]), so forkd warns about the sidecar it lacks
    registry = httpx.get(f"{hub.url}/registry.json").json()
    entry = registry["packages"]["acme/py"]["versions"]["v1"]
    pack = tmp_path / "hub-pack.forkd-snapshot.tar.zst"
    pack.write_bytes(httpx.get(entry["url"]).content)
    assert hashlib.sha256(pack.read_bytes()).hexdigest() == entry["sha256"]
    assert read_pack_manifest(pack).rootfs == {"target_path": portable, "sha256": sha, "size": fallback.stat().st_size}
    d = host(tmp_path, "d", hub)
    forkd_pulled = run(d, "pull", "--hub", f"{hub.url}/registry.json", "acme/py@v1")
    assert f"{sha[:16]}.rootfs.zst" in forkd_pulled.stderr, forkd_pulled.stderr
    assert snapshot_json(d, "py")["rootfs"] == portable


def test_a_forkd_v1_pack_naming_no_rootfs_is_unpacked_without_one(hub: HubProcess, tmp_path: Path) -> None:
    """forkd packs a rootfs.ext4 that sits in the directory whatever snapshot.json says; ours must not add a
    ``rootfs`` naming it (forkd's pack of the result would send that store path to every other host)."""
    src = make_base_source(tmp_path / "src", rootfs=True)
    (src / "snapshot.json").write_text(
        json.dumps({"vmstate": "/home/u/.local/share/forkd/snapshots/py/vmstate", "memory": "/m", "volumes": []})
    )
    pack = tmp_path / "py.forkd-snapshot.tar.zst"
    write_pack([PackLink("py", src, None, None)], pack, description=None, base_image=None)
    assert read_pack_manifest(pack).rootfs is None

    b = host(tmp_path, "b", hub)
    run(b, "unpack", str(pack))
    doc = snapshot_json(b, "py")
    assert "rootfs" not in doc and doc["volumes"] == []
    assert (Path(b["FORKD_HOME"]) / "snapshots" / "py" / "rootfs.ext4").read_bytes() == (
        src / "rootfs.ext4"
    ).read_bytes()
    run(b, "login", hub.url, "--token-stdin", input=hub.token("ci", "push:acme/*") + "\n")
    pushed = run(b, "push", "py", "acme/py:v1", "--json")
    assert "warnings" not in json.loads(pushed.stdout) and "not uploaded" not in pushed.stderr  # the disk is sent
