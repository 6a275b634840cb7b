"""Recorded-API tests of FirecrackerDriver against a fake ``firecracker`` (tests/vmm/fake_firecracker.py).

These are "recorded-API" tests: no real Firecracker runs (it needs hardware KVM, which this host
lacks). The fake checks request bodies and ordering against Firecracker's documented API, and
these tests check the exact request sequence the driver sends for boot, snapshot, fork and chain
links. They prove the driver speaks the documented protocol, not that a real guest boots.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from manifest.fileops import clone_file
from vmm.base import BootSpec
from vmm.errors import VmmProtocolError
from vmm.firecracker import FirecrackerDriver
from vmm.firecracker.api import FirecrackerApi
from vmm.kvm import kvm_problem
from vmm.testing import DriverConformance, file_sha256

FAKE = Path(__file__).with_name("fake_firecracker.py")
MEM_MIB = 16
pytestmark = pytest.mark.slow  # starts real (fake-firecracker) processes


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``firecracker`` executable that runs the fake with this interpreter."""
    bin_dir = tmp_path_factory.mktemp("fake-bin")
    script = bin_dir / "firecracker"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def fc(fake_bin: Path) -> FirecrackerDriver:
    return FirecrackerDriver(binary=str(fake_bin), require_kvm=False)


def spec_for(tmp: Path, rootfs: Path | None = None) -> BootSpec:
    kernel = tmp / "vmlinux"
    kernel.write_bytes(b"\x7fELF fake vmlinux")
    return BootSpec(
        kernel=kernel,
        initrd=None,
        cmdline="console=ttyS0 reboot=k panic=1",
        work_dir=tmp / "vm",
        rootfs=rootfs,
        mem_mib=MEM_MIB,
        boot_timeout=20,
    )


def requests(work_dir: Path) -> list[dict]:
    lines = (work_dir / "fake-firecracker.requests.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["method"] != "GET"]


def calls(work_dir: Path) -> list[str]:
    return [f"{r['method']} {r['path']}" for r in requests(work_dir)]


class TestFirecrackerConformance(DriverConformance):
    """Recorded-API: the conformance suite against the fake (guest-kernel checks are skipped)."""

    real_guest = False

    @pytest.fixture(scope="class")
    def driver(self, fc: FirecrackerDriver) -> FirecrackerDriver:
        return fc

    @pytest.fixture(scope="class")
    def boot_spec(self, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], BootSpec]:
        tmp = tmp_path_factory.mktemp("fc-kernel")
        return lambda work_dir: BootSpec(**{**spec_for(tmp).__dict__, "work_dir": work_dir})


def test_boot_sends_the_documented_sequence(fc: FirecrackerDriver, tmp_path: Path) -> None:
    """Recorded-API: machine-config → boot-source → drive → InstanceStart, with exact bodies."""
    disk = tmp_path / "disk.ext4"
    disk.write_bytes(b"\0" * 4096)
    vm = fc.boot(spec_for(tmp_path, rootfs=disk))
    try:
        assert vm.run("echo hi").output == "hi\n"
        assert vm.compat.vmm == "firecracker" and vm.compat.device_ids == ("rootfs",)
    finally:
        vm.kill()
    reqs = requests(vm.work_dir)
    assert calls(vm.work_dir) == ["PUT /machine-config", "PUT /boot-source", "PUT /drives/rootfs", "PUT /actions"]
    assert reqs[0]["body"] == {"vcpu_count": 1, "mem_size_mib": MEM_MIB, "track_dirty_pages": False}
    assert reqs[1]["body"] == {
        "kernel_image_path": str(tmp_path / "vmlinux"),
        "boot_args": "console=ttyS0 reboot=k panic=1",
    }
    assert reqs[2]["body"] == {
        "drive_id": "rootfs",
        "path_on_host": str(disk),
        "is_root_device": False,
        "is_read_only": False,
    }
    assert reqs[3]["body"] == {"action_type": "InstanceStart"}


def test_snapshot_and_fork_send_the_documented_sequence(fc: FirecrackerDriver, tmp_path: Path) -> None:
    """Recorded-API: Paused → snapshot/create Full; per child snapshot/load File backend →
    PATCH drive to the child's disk → Resumed; the stored memory file is never written."""
    disk = tmp_path / "disk.ext4"
    disk.write_bytes(b"\0" * 4096)
    vm = fc.boot(spec_for(tmp_path, rootfs=disk))
    snap = fc.snapshot(vm, tmp_path / "snap")
    assert not vm.alive
    assert calls(vm.work_dir)[-2:] == ["PATCH /vm", "PUT /snapshot/create"]
    create = requests(vm.work_dir)[-1]["body"]
    assert create["snapshot_type"] == "Full"
    assert Path(create["mem_file_path"]).parent == tmp_path / "snap"
    assert snap.rootfs == tmp_path / "snap" / "rootfs.ext4"
    before = file_sha256(snap.memory)

    disks = [tmp_path / f"child{i}.ext4" for i in range(2)]
    for d in disks:
        clone_file(disk, d)
    children = fc.fork(snap, 2, disks=disks, work_dir=tmp_path / "kids")
    try:
        for i, child in enumerate(children):
            assert child.run("echo child").output == "child\n"
            assert calls(child.work_dir)[:3] == ["PUT /snapshot/load", "PATCH /drives/rootfs", "PATCH /vm"]
            load, drive, resume = (r["body"] for r in requests(child.work_dir)[:3])
            assert load == {
                "snapshot_path": str(snap.vmstate),
                "mem_backend": {"backend_type": "File", "backend_path": str(snap.memory)},
                "track_dirty_pages": False,
                "resume_vm": False,
            }
            assert drive == {"drive_id": "rootfs", "path_on_host": str(disks[i])}
            assert resume == {"state": "Resumed"}
            assert child.mem_stats().rss > 0
    finally:
        for child in children:
            child.kill()
    assert file_sha256(snap.memory) == before


def test_chain_link_merges_the_diff_into_the_clone(fc: FirecrackerDriver, tmp_path: Path) -> None:
    """Recorded-API: a link loads the clone with dirty tracking, takes a Diff snapshot and the
    driver merges those pages into the clone, which becomes the link's memory.bin."""
    base = fc.snapshot(fc.boot(spec_for(tmp_path)), tmp_path / "base")
    base_hash = file_sha256(base.memory)
    link_dir = tmp_path / "l2"
    link_dir.mkdir()
    clone_file(base.memory, link_dir / "memory.bin")
    vm = fc.restore_writable(base, link_dir / "memory.bin", link_dir)
    vm.run("echo link-layer-writes-a-page")
    link = fc.snapshot(vm, link_dir)
    load = requests(link_dir)[0]["body"]
    assert load["track_dirty_pages"] is True
    assert requests(link_dir)[-1]["body"]["snapshot_type"] == "Diff"
    assert not (link_dir / "memory.diff.partial").exists()
    assert file_sha256(base.memory) == base_hash
    assert b"link-layer-writes-a-page" in link.memory.read_bytes()
    assert b"fake kernel booted" in link.memory.read_bytes()  # the parent's pages are kept


def test_api_faults_surface_with_firecrackers_message(fc: FirecrackerDriver, tmp_path: Path) -> None:
    """Recorded-API: a 400 from the API becomes VmmProtocolError carrying fault_message."""
    vm = fc.boot(spec_for(tmp_path))
    try:
        with pytest.raises(VmmProtocolError, match="not supported after starting"):
            vm.api.put("/machine-config", {"vcpu_count": 1, "mem_size_mib": 32})
        with pytest.raises(VmmProtocolError, match="unknown field `colour`"):
            vm.api.patch("/vm", {"state": "Paused", "colour": "red"})
        with pytest.raises(VmmProtocolError, match="not paused"):
            vm.api.put("/snapshot/create", {"snapshot_path": str(tmp_path / "s"), "mem_file_path": str(tmp_path / "m")})
    finally:
        vm.kill()


def test_api_client_reports_a_dead_socket(tmp_path: Path) -> None:
    api = FirecrackerApi(tmp_path / "nobody.sock", timeout=0.2)
    with pytest.raises(VmmProtocolError, match="GET /version"):
        api.get("/version")


def test_availability_requires_kvm_unless_told_otherwise(fake_bin: Path, monkeypatch) -> None:
    strict = FirecrackerDriver(binary=str(fake_bin)).available()
    problem = kvm_problem()
    assert strict.ok == (problem is None)
    if problem:
        assert "KVM" in strict.reason and problem in strict.reason
    monkeypatch.setenv("PATH", f"{fake_bin.parent}:/usr/bin:/bin")
    assert FirecrackerDriver(require_kvm=False).available().ok  # found on PATH
    missing = FirecrackerDriver(binary="no-such-firecracker").available()
    assert not missing.ok and "not found" in missing.reason
