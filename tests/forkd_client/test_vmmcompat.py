"""The compat vocabulary mapping (vmm's CompatInfo ⇄ the manifest's compat) and the host check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkd_client.errors import InvalidSnapshotDir
from forkd_client.store import SnapshotStore
from forkd_client.vmmcompat import (
    RESTORE_CRITICAL,
    check_host_compat,
    from_manifest_compat,
    to_manifest_compat,
)
from manifest.mediatypes import COMPAT_FIELDS
from vmm import CompatibilityError, CompatInfo, QemuMicrovmDriver

from .snapshots import make_base_source

INFO = CompatInfo(
    vmm="qemu-microvm",
    vmm_version="7.2.22",
    machine="microvm",
    accel="tcg",
    arch="x86_64",
    cpu_model="max",
    vcpus=2,
    mem_mib=4,
    device_ids=("rootfs", "data"),
    kernel_release="6.1.0-57-cloud-amd64",
    kernel_digest="sha256:" + "ab" * 32,
)
MANIFEST = {
    "vmm": "qemu-microvm",
    "vmmVersion": "7.2.22",
    "machine": "microvm",
    "accel": "tcg",
    "arch": "x86_64",
    "cpu": "max",
    "vcpus": 2,
    "memMiB": 4,
    "kernel": "6.1.0-57-cloud-amd64",
    "kernelDigest": "sha256:" + "ab" * 32,
    "deviceIds": "rootfs,data",
}


class FixedHost:
    """A host whose facts are fixed: implements the one driver method the check uses."""

    name = "qemu-microvm"

    def __init__(self, **overrides: object) -> None:
        self.overrides = overrides

    def host_compat(self, mem_mib: float, vcpus: int, device_ids: tuple[str, ...]) -> CompatInfo:
        base = CompatInfo(
            vmm="qemu-microvm",
            vmm_version="7.2.22",
            machine="microvm",
            accel="tcg",
            arch="x86_64",
            cpu_model="max",
            vcpus=vcpus,
            mem_mib=mem_mib,
            device_ids=device_ids,
        )
        return CompatInfo(**{**base.to_dict(), "device_ids": device_ids, **self.overrides})


def test_compat_info_maps_to_the_manifest_vocabulary_and_back() -> None:
    assert to_manifest_compat(INFO) == MANIFEST
    assert from_manifest_compat(MANIFEST) == INFO


def test_driver_dict_from_vmm_json_maps_like_the_dataclass() -> None:
    assert to_manifest_compat(INFO.to_dict()) == MANIFEST


def test_documented_keys_have_the_manifest_types() -> None:
    mapped = to_manifest_compat(INFO)
    for key, kind in COMPAT_FIELDS.items():
        assert isinstance(mapped[key], kind), key
    assert all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in mapped.values())


def test_mapping_is_idempotent_and_keeps_extra_keys() -> None:
    extra = {**MANIFEST, "numaNodes": 1, "hostKernel": "6.1"}
    assert to_manifest_compat(extra) == extra


def test_partial_record_maps_only_what_is_there() -> None:
    assert to_manifest_compat({"vmm": "qemu", "vcpus": 1, "mem_mib": 256.0}) == {
        "vmm": "qemu",
        "vcpus": 1,
        "memMiB": 256,
    }


def test_unknown_facts_and_an_empty_device_list_are_omitted() -> None:
    info = CompatInfo("qemu-microvm", "7.2.22", "microvm", "tcg", "x86_64", "max", 1, 128)
    mapped = to_manifest_compat(info)
    assert "deviceIds" not in mapped and "kernel" not in mapped and "kernelDigest" not in mapped
    assert from_manifest_compat(mapped) == info


@pytest.mark.parametrize("value", [True, [1], {"a": 1}, 1.5])
def test_values_the_manifest_cannot_carry_are_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ValueError, match="weird"):
        to_manifest_compat({"weird": value})


def test_from_manifest_is_tolerant_of_missing_and_unknown_keys() -> None:
    info = from_manifest_compat({"vmm": "qemu-microvm", "future": "x", "vcpus": "two"})
    assert info.vmm == "qemu-microvm" and info.vmm_version == "" and info.vcpus == 0
    assert info.device_ids == () and info.kernel_release is None


def test_matching_record_passes() -> None:
    check_host_compat(MANIFEST, FixedHost())


def test_mismatch_names_each_field_in_the_manifest_vocabulary() -> None:
    with pytest.raises(CompatibilityError) as info:
        check_host_compat({**MANIFEST, "accel": "kvm", "cpu": "host"}, FixedHost(), what="snapshot 'x'")
    message = str(info.value)
    assert "snapshot 'x'" in message
    assert "accel: recorded 'kvm', here 'tcg'" in message and "cpu: recorded 'host', here 'max'" in message
    assert info.value.fields == {"accel": ("kvm", "tcg"), "cpu": ("host", "max")}


def test_host_differences_are_found_too() -> None:
    with pytest.raises(CompatibilityError, match=r"vmmVersion: recorded '7.2.22', here '8.2.0'"):
        check_host_compat(MANIFEST, FixedHost(vmm_version="8.2.0"))


def test_missing_critical_key_is_a_mismatch() -> None:
    partial = {k: v for k, v in MANIFEST.items() if k != "machine"}
    with pytest.raises(CompatibilityError, match="machine: recorded nothing, here 'microvm'"):
        check_host_compat(partial, FixedHost())
    assert set(RESTORE_CRITICAL) >= {"vmm", "vmmVersion", "machine", "accel", "arch", "memMiB"}


def test_memory_size_comes_from_the_file_when_given(tmp_path: Path) -> None:
    memory = tmp_path / "memory.bin"
    with open(memory, "wb") as f:
        f.truncate(8 << 20)
    with pytest.raises(CompatibilityError) as info:
        check_host_compat(MANIFEST, FixedHost(), memory=memory)
    assert info.value.fields == {"memMiB": (4, 8)}


@pytest.mark.integration  # runs qemu-system-x86_64 --version (tests/tiers.py)
def test_real_qemu_host_accepts_its_own_record_and_refuses_another_accel(tmp_path: Path) -> None:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed")
    driver = QemuMicrovmDriver()
    own = to_manifest_compat(driver.host_compat(4, 1, ()))
    check_host_compat(own, driver)
    other = "kvm" if own["accel"] == "tcg" else "tcg"
    with pytest.raises(CompatibilityError, match=f"accel: recorded '{other}'"):
        check_host_compat({**own, "accel": other}, driver)


def test_import_stores_the_manifest_vocabulary(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    (src / "vmm.json").write_text(json.dumps({"compat": INFO.to_dict(), "rootfs": None}))
    snap = store.import_snapshot(src, "t")
    assert snap.compat == MANIFEST
    assert store.get("t").compat == MANIFEST  # read back from forkd-hub.json


def test_import_maps_compat_json_and_the_compat_argument(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    (src / "compat.json").write_text(json.dumps({"vmm_version": "7.2.22", "memMiB": 4}))
    snap = store.import_snapshot(src, "t", compat={"cpu_model": "max"})
    assert snap.compat == {"vmmVersion": "7.2.22", "memMiB": 4, "cpu": "max"}


def test_import_refuses_a_compat_value_the_manifest_cannot_carry(store: SnapshotStore, tmp_path: Path) -> None:
    src = make_base_source(tmp_path / "src")
    (src / "compat.json").write_text(json.dumps({"numa": [0, 1]}))
    with pytest.raises(InvalidSnapshotDir, match=r"compat\.json: compat numa"):
        store.import_snapshot(src, "t")
    assert not store.exists("t")
