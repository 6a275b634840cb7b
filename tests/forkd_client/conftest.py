from __future__ import annotations

from pathlib import Path

import pytest

from forkd_client.store import SnapshotStore

from .snapshots import make_base_source, make_link_source


@pytest.fixture(autouse=True)
def rootfs_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where unpacked rootfs images may go besides the store's own rootfs/ (never the real
    /var/cache/forkd in tests)."""
    cache = tmp_path / "var-cache-forkd"
    monkeypatch.setenv("FORKD_ROOTFS_DIRS", str(cache))
    return cache


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh store root, also exported as FORKD_HOME for the CLI."""
    root = tmp_path / "home"
    monkeypatch.setenv("FORKD_HOME", str(root))
    return root


@pytest.fixture
def store(home: Path):
    with SnapshotStore(home) as s:
        yield s


@pytest.fixture
def chain3(store: SnapshotStore, tmp_path: Path) -> SnapshotStore:
    """A store holding base <- mid <- head (each link a full, slightly changed image)."""
    base_src = make_base_source(tmp_path / "src-base", seed=1)
    mid_src = make_link_source(tmp_path / "src-mid", base_src / "memory.bin", seed=2)
    head_src = make_link_source(tmp_path / "src-head", mid_src / "memory.bin", seed=3)
    store.import_snapshot(base_src, "base")
    store.import_snapshot(mid_src, "mid", parent="base")
    store.import_snapshot(head_src, "head", parent="mid")
    return store
