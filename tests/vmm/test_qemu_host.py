"""Accelerator choice and host probing for QEMU (pure functions over fake /proc and /sys files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmm.errors import VmmUnavailable
from vmm.kvm import kvm_problem
from vmm.qemu import QemuMicrovmDriver, host

CPUINFO = "processor\t: 0\nflags\t\t: fpu {flag} constant_tsc\ncpu MHz\t\t: 2596.146\n"


def fake_host(tmp_path: Path, flag: str = "vmx", pvm: bool = False, dev: bool = True):
    tmp_path.mkdir()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(flag=flag))
    kvm = tmp_path / "kvm"
    if dev:
        kvm.write_bytes(b"")
    pvm_dir = tmp_path / "kvm_pvm"
    if pvm:
        pvm_dir.mkdir()
    return {"dev": kvm, "cpuinfo": cpuinfo, "pvm_module": pvm_dir}


def test_kvm_usable_only_with_virt_flags_no_pvm_and_an_openable_device(tmp_path: Path) -> None:
    assert kvm_problem(**fake_host(tmp_path / "a")) is None
    assert "PVM" in kvm_problem(**fake_host(tmp_path / "b", pvm=True))
    assert "vmx nor svm" in kvm_problem(**fake_host(tmp_path / "c", flag="sse2"))
    assert "cannot open" in kvm_problem(**fake_host(tmp_path / "d", dev=False))


def test_accel_override_and_environment(monkeypatch) -> None:
    monkeypatch.setenv(host.ACCEL_ENV, "tcg")
    assert host.pick_accel() == ("tcg", "forced to tcg")
    assert host.pick_accel("kvm")[0] == "kvm"
    monkeypatch.setenv(host.ACCEL_ENV, "hvf")
    with pytest.raises(VmmUnavailable, match="hvf"):
        host.pick_accel()
    monkeypatch.delenv(host.ACCEL_ENV)
    accel, reason = host.pick_accel()
    assert accel == ("kvm" if kvm_problem() is None else "tcg") and reason


def test_tsc_frequency_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(flag="vmx"))
    assert host.host_tsc_khz(cpuinfo) == 2596146
    cpuinfo.write_text(CPUINFO.format(flag="vmx").replace("constant_tsc", ""))
    assert host.host_tsc_khz(cpuinfo) is None


def test_missing_binary_is_reported_not_raised(tmp_path: Path) -> None:
    status = QemuMicrovmDriver(binary=str(tmp_path / "no-such-qemu")).available()
    assert not status.ok and "not found" in status.reason


@pytest.mark.integration  # runs qemu-system-x86_64 (tests/tiers.py)
def test_forcing_kvm_where_it_does_not_work_is_reported(monkeypatch) -> None:
    monkeypatch.delenv(host.ACCEL_ENV, raising=False)
    status = QemuMicrovmDriver(accel="kvm").available()
    if kvm_problem() is None:
        assert status.ok and status.accel == "kvm"
    else:
        assert not status.ok and "KVM forced but unusable" in status.reason
