"""The in-process hub and the 3-link chain of tests/forkd_client/hub, and a real hub process, for the lazy tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess
from tests.forkd_client.hub.conftest import inproc_hub, other_store  # noqa: F401


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    """A ``forkd-hub serve`` process with its data under ``tmp_path / "hub"``; it must stop cleanly."""
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0
