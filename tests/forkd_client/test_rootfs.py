"""Where a pack's rootfs image lands: forkd's target only inside the allowed roots, never a path content chose."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkd_client.rootfs import own_path, place_rootfs
from manifest.forkd_pack import PackHashMismatch, PackManifestInvalid, PackTooLarge
from manifest.rootfs_sidecar import RootfsInfo, file_sha256, install_sidecar, sidecar_name, write_sidecar


@pytest.fixture
def sidecar(tmp_path: Path) -> tuple[RootfsInfo, Path]:
    image = tmp_path / "image.ext4"
    image.write_bytes(os.urandom(5000) + bytes(70000) + b"end")
    out = tmp_path / "packs"
    out.mkdir()
    info, path = write_sidecar(image, out, lambda sha: f"/var/cache/forkd/{sha[:16]}.ext4", level=3)
    assert path.name == sidecar_name(info.sha256) == f"{info.sha256[:16]}.rootfs.zst"
    assert info.size == image.stat().st_size and info.target_path == f"/var/cache/forkd/{info.sha256[:16]}.ext4"
    return info, out


def at(info: RootfsInfo, target: Path | str) -> RootfsInfo:
    return RootfsInfo(str(target), info.sha256, info.size)


def test_a_target_inside_an_allowed_root_is_used(sidecar, tmp_path, rootfs_dirs):
    info, packs = sidecar
    target = rootfs_dirs / "python-3-12-slim.ext4"
    placed = place_rootfs(tmp_path / "home", at(info, target), packs, None)
    assert placed == target and file_sha256(target) == info.sha256
    assert place_rootfs(tmp_path / "home", at(info, target), tmp_path / "no-sidecar-here", None) == target  # reused


@pytest.mark.parametrize(
    "target",
    [
        "/etc/forkd-evil.ext4",
        "{tmp}/elsewhere/x.ext4",
        "{cache}/../escape.ext4",
        "{cache}/link/x.ext4",
        "relative/x.ext4",
    ],
)
def test_any_other_target_goes_to_the_stores_own_place(sidecar, tmp_path, rootfs_dirs, target):
    info, packs = sidecar
    rootfs_dirs.mkdir(parents=True, exist_ok=True)
    (tmp_path / "elsewhere").mkdir()
    (rootfs_dirs / "link").symlink_to(tmp_path / "elsewhere")  # a symlink out of the allowed root
    path = target.format(tmp=tmp_path, cache=rootfs_dirs)
    placed = place_rootfs(tmp_path / "home", at(info, path), packs, None)
    assert (
        placed == own_path(tmp_path / "home", info.sha256) == tmp_path / "home" / "rootfs" / f"{info.sha256[:16]}.ext4"
    )
    assert file_sha256(placed) == info.sha256
    assert not Path("/etc/forkd-evil.ext4").exists() and os.listdir(tmp_path / "elsewhere") == []
    assert not (tmp_path / "escape.ext4").exists()


def test_an_existing_different_file_is_never_replaced(sidecar, tmp_path, rootfs_dirs):
    info, packs = sidecar
    rootfs_dirs.mkdir(parents=True)
    target = rootfs_dirs / "shared.ext4"
    target.write_bytes(b"someone else's image")
    placed = place_rootfs(tmp_path / "home", at(info, target), packs, None)
    assert target.read_bytes() == b"someone else's image"
    assert placed == own_path(tmp_path / "home", info.sha256)


def test_a_missing_sidecar_warns_as_forkd_does(sidecar, tmp_path):
    info, _ = sidecar
    warnings: list[str] = []
    assert place_rootfs(tmp_path / "home", info, tmp_path, warnings) is None
    assert len(warnings) == 1 and sidecar_name(info.sha256) in warnings[0]


def test_a_sidecar_that_does_not_match_is_refused_and_nothing_is_left(sidecar, tmp_path):
    info, packs = sidecar
    dest = tmp_path / "out.ext4"
    with pytest.raises(PackHashMismatch):
        install_sidecar(packs / sidecar_name(info.sha256), dest, RootfsInfo(info.target_path, "0" * 64, info.size))
    with pytest.raises(PackTooLarge):
        install_sidecar(packs / sidecar_name(info.sha256), dest, RootfsInfo(info.target_path, info.sha256, 10))
    assert not dest.exists() and os.listdir(tmp_path).count("out.ext4.partial") == 0


@pytest.mark.parametrize(
    "table",
    [
        None,
        {"target_path": 3, "sha256": "0" * 64, "size": 1},
        {"target_path": "/x", "sha256": "ABC", "size": 1},
        {"target_path": "/x", "sha256": "0" * 64, "size": -1},
    ],
)
def test_malformed_rootfs_tables_are_typed_errors(table):
    with pytest.raises(PackManifestInvalid, match="rootfs"):
        RootfsInfo.from_table(table)


def test_a_vm_disk_comes_only_from_allowed_places(store, tmp_path, rootfs_dirs):
    """A snapshot.json naming an arbitrary host file (pulled or unpacked content) never becomes a VM disk."""
    import json

    from forkd_client.vmops.host import snapshot_rootfs

    from .snapshots import make_base_source

    store.import_snapshot(make_base_source(tmp_path / "src"), "py")
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"do not attach")
    rootfs_dirs.mkdir(parents=True)
    cached = rootfs_dirs / "py.ext4"
    cached.write_bytes(b"image")
    doc_path = store.path("py") / "snapshot.json"
    for recorded, expected in [(str(secret), None), (str(cached), cached), (str(rootfs_dirs / "missing.ext4"), None)]:
        doc_path.write_text(json.dumps({**json.loads(doc_path.read_text()), "rootfs": recorded}))
        assert snapshot_rootfs(store.get("py")) == expected, recorded
