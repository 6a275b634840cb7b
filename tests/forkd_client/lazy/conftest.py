"""The in-process hub and the 3-link chain of tests/forkd_client/hub, a real hub process, and an HTTP
server on the host's loopback (reached from a guest with --net), for the lazy tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess
from tests.forkd_client.hub.conftest import inproc_hub, other_store  # noqa: F401
from tests.vmm.test_qemu_rootfs import loopback_server  # noqa: F401  (an HTTP server on the host's loopback)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    """A ``forkd-hub serve`` process with its data under ``tmp_path / "hub"``; it must stop cleanly."""
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0
