"""A real hub in-process (Litestar TestClient, which is an httpx.Client) for push/pull tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from forkd_client.hub.client import HubClient
from forkd_client.store import SnapshotStore
from hub_server.app import create_app
from hub_server.settings import Settings
from tests.services.sqlite import seed


class InProcessHub:
    def __init__(self, client: TestClient[Any]) -> None:
        self.http = client

    def token(self, name: str, *scopes: str) -> str:
        tokens = self.http.app.state.tokens
        return self.http.blocking_portal.call(lambda: tokens.create(name, list(scopes), None))

    def client(self, token: str | None = None) -> HubClient:
        return HubClient(str(self.http.base_url), token, http=self.http)


@pytest.fixture
def inproc_hub(tmp_path: Path, sqlite_template: Path) -> Iterator[InProcessHub]:
    settings = replace(Settings.for_data_dir(tmp_path / "hub"), storage=f"filesystem root={tmp_path / 'hub' / 'blobs'}")
    seed(tmp_path / "hub", sqlite_template)  # a database at the schema head (tests/services/sqlite.py)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield InProcessHub(client)


@pytest.fixture
def other_store(tmp_path: Path) -> Iterator[SnapshotStore]:
    with SnapshotStore(tmp_path / "other-home") as s:
        yield s


@pytest.fixture
def xfs_dir(tmp_path: Path) -> Iterator[Path]:
    """A loop-mounted XFS filesystem with reflink (needs root and mkfs.xfs; skips otherwise)."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("reflink test needs root for a loop mount")
    if not shutil.which("mkfs.xfs"):
        pytest.skip("mkfs.xfs not installed (apt-get install xfsprogs)")
    image, mnt = tmp_path / "xfs.img", tmp_path / "xfs"
    with open(image, "wb") as f:
        f.truncate(1 << 30)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True, timeout=60)
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True, timeout=60)
    if mounted.returncode != 0:
        pytest.skip(f"loop mount not allowed here: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], timeout=60)
