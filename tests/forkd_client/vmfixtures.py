"""Fixtures shared by the tests that boot real VMs."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from vmm import process

QEMU = "qemu-system-x86_64"


def needs_qemu(test):
    """Real-VM test: marked qemu + slow, skipped only where QEMU is not installed."""
    for mark in (
        pytest.mark.qemu,
        pytest.mark.slow,
        pytest.mark.skipif(
            shutil.which(QEMU) is None, reason=f"{QEMU} is not installed (run scripts/install-vmm-deps.sh)"
        ),
    ):
        test = mark(test)
    return test


@pytest.fixture(autouse=True)
def no_vm_left_running() -> Iterator[None]:
    yield
    leaked = process.live_pids()
    process.kill_all()
    assert leaked == [], f"VMM processes left running: {leaked}"
