"""Fixtures for the vmm tests: the cached guest image and a QEMU availability gate."""

from __future__ import annotations

import shutil

import pytest

from vmm import process
from vmm.guest import GuestImage, cached_guest

QEMU = "qemu-system-x86_64"


@pytest.fixture(scope="session")
def guest() -> GuestImage:
    """The test guest from the cache (built on first use; ``scripts/install-vmm-deps.sh`` prebuilds)."""
    if shutil.which(QEMU) is None:
        pytest.skip(f"{QEMU} is not installed (run scripts/install-vmm-deps.sh)")
    return cached_guest()


@pytest.fixture(autouse=True, scope="module")
def no_leaked_vmm_processes():
    """Every module must leave no VMM process behind."""
    yield
    leaked = process.live_pids()
    process.kill_all()
    assert leaked == [], f"VMM processes left running: {leaked}"
