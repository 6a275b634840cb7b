"""Guest image build from an unpacked kernel tree: modules, initramfs, cache reuse."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from vmm.errors import GuestBuildError
from vmm.guest import build as guest_build
from vmm.guest.build import _has_interpreter, _modinfo_depends, build_guest
from vmm.guest.initramfs import read_newc
from vmm.guest.kernel import GUEST_MODULES, open_kernel_tree

RELEASE = "6.1.0-99-cloud-amd64"
DEPENDS = {
    "virtio_ring": "",
    "virtio": "virtio_ring",
    "virtio_mmio": "virtio,virtio_ring",
    "virtio_blk": "virtio,virtio_ring",
    "virtio-rng": "virtio,virtio_ring",
    "virtio_net": "net_failover",
    "net_failover": "failover",
    "failover": "",
}


def fake_kernel_tree(root: Path) -> Path:
    """What `dpkg -x linux-image-*.deb` leaves, with modules carrying real-looking .modinfo."""
    (root / "boot").mkdir(parents=True)
    (root / "boot" / f"vmlinuz-{RELEASE}").write_bytes(b"MZ fake bzImage")
    mods = root / "lib" / "modules" / RELEASE / "kernel" / "drivers"
    mods.mkdir(parents=True)
    for name, deps in DEPENDS.items():
        (mods / f"{name}.ko").write_bytes(
            b"\x7fELF\0license=GPL\0depends=" + deps.encode() + b"\0name=" + name.replace("-", "_").encode() + b"\0"
        )
    return root


def test_modinfo_depends_is_read_from_module_bytes() -> None:
    assert _modinfo_depends(b"junk\0depends=virtio,virtio_ring\0name=x\0") == ["virtio", "virtio_ring"]
    assert _modinfo_depends(b"\0depends=\0") == []
    assert _modinfo_depends(b"no modinfo") == []


def test_busybox_static_check_detects_a_dynamic_binary() -> None:
    static = guest_build.reseed_elf()
    assert not _has_interpreter(static)
    phoff = struct.unpack_from("<Q", static, 0x20)[0]
    dynamic = static[:phoff] + struct.pack("<I", 3) + static[phoff + 4 :]  # PT_LOAD → PT_INTERP
    assert _has_interpreter(dynamic)
    assert _has_interpreter(b"#!/bin/sh\n")


@pytest.mark.integration  # runs mkfs.ext4 (tests/tiers.py)
def test_build_reuses_a_matching_build_and_rebuilds_on_change(tmp_path: Path, monkeypatch) -> None:
    tree = fake_kernel_tree(tmp_path / "kroot")
    image = build_guest(tmp_path / "out", kernel_root=tree)
    assert image.kernel_release == RELEASE and image.kernel.read_bytes() == b"MZ fake bzImage"
    files = {e.path: (e.mode, e.data) for e in read_newc(image.initrd.read_bytes())}
    order = files["lib/modules/load-order"][1].decode().split()
    # dependencies first: virtio_net's (net_failover, failover) come right before it
    assert order == [
        "virtio_ring",
        "virtio",
        "virtio_mmio",
        "virtio_blk",
        "failover",
        "net_failover",
        "virtio_net",
        "virtio_rng",
    ]
    assert set(GUEST_MODULES) <= set(order)
    assert "bin/forkd-clock" in files and "forkd-agent" in files
    assert "lib/modules/virtio_rng.ko" in files and "bin/forkd-reseed" in files
    assert files["init"][1].startswith(b"#!/bin/sh")
    assert "dev/console" in files

    stamp = image.initrd.stat().st_mtime_ns
    assert build_guest(tmp_path / "out", kernel_root=tree).initrd.stat().st_mtime_ns == stamp
    monkeypatch.setattr(guest_build, "CMDLINE", guest_build.CMDLINE + " debug")
    rebuilt = build_guest(tmp_path / "out", kernel_root=tree)
    assert rebuilt.cmdline.endswith(" debug")
    assert json.loads((tmp_path / "out" / "guest.json").read_text())["kernel_release"] == RELEASE


def test_a_missing_module_is_named(tmp_path: Path) -> None:
    tree = fake_kernel_tree(tmp_path / "kroot")
    next(tree.rglob("virtio_blk.ko")).unlink()
    with pytest.raises(GuestBuildError, match="virtio_blk"):
        build_guest(tmp_path / "out", kernel_root=tree)


def test_kernel_tree_needs_exactly_one_vmlinuz(tmp_path: Path) -> None:
    with pytest.raises(GuestBuildError, match="vmlinuz"):
        open_kernel_tree(tmp_path)
