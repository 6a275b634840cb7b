"""The driver contract's data types: compat records, the compat check, snapshot file sets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vmm.base import CompatInfo, SnapshotFiles, check_compat
from vmm.errors import CompatibilityError, RestoreFailed, VmmError

COMPAT = CompatInfo(
    vmm="qemu-microvm",
    vmm_version="7.2.22",
    machine="microvm",
    accel="tcg",
    arch="x86_64",
    cpu_model="max",
    vcpus=1,
    mem_mib=256,
    device_ids=("rootfs",),
    kernel_release="6.1.0-57-cloud-amd64",
    kernel_digest="sha256:ab",
)


def test_compat_round_trips_through_a_dict() -> None:
    assert CompatInfo.from_dict(COMPAT.to_dict()) == COMPAT
    assert COMPAT.to_dict()["device_ids"] == ["rootfs"]


def test_compat_from_dict_names_unknown_and_missing_fields() -> None:
    with pytest.raises(VmmError, match=r"unknown field.*colour"):
        CompatInfo.from_dict({**COMPAT.to_dict(), "colour": "red"})
    data = COMPAT.to_dict()
    del data["accel"]
    with pytest.raises(VmmError, match="accel"):
        CompatInfo.from_dict(data)


def test_check_compat_accepts_an_identical_host_and_ignores_kernel_fields() -> None:
    check_compat(COMPAT, dataclasses.replace(COMPAT, kernel_release=None, kernel_digest=None))


def test_check_compat_names_every_differing_field_with_both_values() -> None:
    host = dataclasses.replace(COMPAT, accel="kvm", cpu_model="host", mem_mib=128)
    with pytest.raises(CompatibilityError) as info:
        check_compat(COMPAT, host)
    message = str(info.value)
    assert "accel: recorded 'tcg', here 'kvm'" in message
    assert "cpu_model: recorded 'max', here 'host'" in message
    assert "mem_mib: recorded 256, here 128" in message
    assert info.value.fields == {"accel": ("tcg", "kvm"), "cpu_model": ("max", "host"), "mem_mib": (256, 128)}
    assert "vmm_version" not in message
    assert isinstance(info.value, RestoreFailed)


def test_snapshot_files_save_and_load(tmp_path: Path) -> None:
    (tmp_path / "memory.bin").write_bytes(b"\0" * 4096)
    (tmp_path / "vmstate").write_bytes(b"state")
    (tmp_path / "rootfs.ext4").write_bytes(b"disk")
    snap = SnapshotFiles(tmp_path / "memory.bin", tmp_path / "vmstate", COMPAT, tmp_path / "rootfs.ext4")
    snap.save_compat()
    assert SnapshotFiles.load(tmp_path) == snap
    assert not list(tmp_path.glob("*.partial"))


def test_snapshot_files_load_reports_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(RestoreFailed, match=r"memory.bin"):
        SnapshotFiles.load(tmp_path)
    (tmp_path / "memory.bin").write_bytes(b"")
    (tmp_path / "vmstate").write_bytes(b"")
    with pytest.raises(RestoreFailed, match=r"vmm.json"):
        SnapshotFiles.load(tmp_path)
    assert SnapshotFiles.load(tmp_path, compat=COMPAT).compat == COMPAT
