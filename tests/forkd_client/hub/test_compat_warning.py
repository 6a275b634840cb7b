"""A pulled snapshot that this host could not fork gets a warning naming why (fork refuses it)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from forkd_client.cli.hub import compat_warning
from forkd_client.vmmcompat import to_manifest_compat
from forkd_client.vmops.host import make_driver

needs_qemu = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86_64 not installed")


def test_no_compat_recorded_means_no_warning(chain3):
    assert compat_warning(chain3.get("base")) is None


@pytest.mark.integration  # runs qemu-system-x86_64 --version (tests/tiers.py)
@needs_qemu
def test_matching_host_gives_no_warning_and_a_mismatch_names_the_field(chain3):
    snap = chain3.get("base")
    memory_mib = (snap.dir / "memory.bin").stat().st_size >> 20
    driver = make_driver("qemu-microvm")
    host = to_manifest_compat(driver.host_compat(memory_mib, 1, ()))
    assert compat_warning(replace(snap, compat=host)) is None
    other_accel = "kvm" if host["accel"] != "kvm" else "tcg"
    warning = compat_warning(replace(snap, compat={**host, "accel": other_accel}))
    assert warning and "accel" in warning and other_accel in warning and "fork" in warning
