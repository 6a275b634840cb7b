"""A mirror of a hub on S3: forkd packs come as 307s to presigned URLs, their sha256 on the hub's redirect; the
mirror follows, checks the bytes against it and serves the pack from its own store."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient, chain_images
from tests.services.servedapp import ServedHub
from tests.services.sqlite import seed


def test_a_pack_redirected_to_s3_is_fetched_checked_and_kept(seaweedfs: Any, tmp_path: Path, sqlite_template: Path):
    seed(tmp_path / "up", sqlite_template)
    upstream = ServedHub(replace(Settings.for_data_dir(tmp_path / "up"), storage=seaweedfs.storage_spec()))
    try:
        token = upstream.token("admin", "admin")
        (tmp_path / "images").mkdir()
        images = chain_images(tmp_path / "images")[:1]
        with httpx.Client(base_url=upstream.url, timeout=60) as http:
            PushClient(http, token).push_chain("acme/public", images, tmp_path / "work", "v1", public=True)
            direct = http.get("/packs/acme/public/v1.forkd-snapshot.tar.zst")
            assert direct.status_code == 307  # the bytes come from the store
        settings = Settings.for_data_dir(tmp_path / "mirror", mirror_of=upstream.url)
        with TestClient(create_app(settings), raise_server_exceptions=False) as mirror:
            version = mirror.get("/registry.json").json()["packages"]["acme/public"]["versions"]["v1"]
            pack = mirror.get(version["url"].removeprefix(str(mirror.base_url).rstrip("/")))
            assert pack.status_code == 200
            assert hashlib.sha256(pack.content).hexdigest() == version["sha256"]
    finally:
        upstream.stop()
