"""Fixtures shared by the tests that boot real VMs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vmm import process


@pytest.fixture(autouse=True)
def no_vm_left_running() -> Iterator[None]:
    yield
    leaked = process.live_pids()
    process.kill_all()
    assert leaked == [], f"VMM processes left running: {leaked}"
