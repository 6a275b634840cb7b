"""``create_app(freeze_gc=True)`` (what ``forkd-hub serve`` builds) moves what startup built out of the collector's way."""

from __future__ import annotations

import gc
from pathlib import Path

from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.settings import Settings


def test_freeze_gc_freezes_what_is_alive_once_started_and_only_when_asked(tmp_path: Path) -> None:
    frozen_before = gc.get_freeze_count()  # the suite freezes what collection left (tests/conftest.py)
    gc.unfreeze()
    try:
        with TestClient(create_app(Settings.for_data_dir(tmp_path / "plain", storage="memory"))) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() == 0
        with TestClient(
            create_app(Settings.for_data_dir(tmp_path / "frozen", storage="memory"), freeze_gc=True)
        ) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() > 10_000  # the app, its routes, SQLAlchemy's mappers…
    finally:
        gc.unfreeze()
        if frozen_before:
            gc.freeze()
