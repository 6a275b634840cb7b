"""Issue 16 item 2 (hub side): a vmstate bomb is refused at push, checked in bounded pieces."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
import zstandard

from hub_server.db.models import Manifest
from manifest.digest import Hasher, digest_bytes
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import expect_error
from tests.hub_server.registry.push.test_manifests import count, put, upload_all

GIB = 1 << 30


def zero_bomb(size: int) -> tuple[bytes, str]:
    """A zstd frame of ``size`` zero bytes (32 KiB for 1 GiB) and the blake3 of those zeros."""
    sink, hasher, block = io.BytesIO(), Hasher("blake3"), bytes(4 << 20)
    with zstandard.ZstdCompressor(level=1).stream_writer(sink, size=size, closefd=False) as w:
        for _ in range(size // len(block)):
            w.write(block)
            hasher.update(block)
    return sink.getvalue(), str(hasher.digest())


@pytest.fixture(scope="module")
def bomb() -> tuple[bytes, str]:
    return zero_bomb(GIB)


def zeros_sha256(size: int) -> str:
    """The sha256 of ``size`` zero bytes (format v2 configs state a vmstate's sha256 too)."""
    hasher, block = Hasher("sha256"), bytes(4 << 20)
    for _ in range(size // len(block)):
        hasher.update(block)
    hasher.update(bytes(size % len(block)))
    return str(hasher.digest())


def with_vmstate(layer, blob: bytes, size: int, digest: str):
    config = json.loads(layer.config)
    config["files"]["vmstate"] = {"size": size, "digest": digest, "sha256": zeros_sha256(size)}
    new_config = json.dumps(config, separators=(",", ":")).encode()
    return dataclasses.replace(layer, vmstate_blob=blob).rebuild(config=new_config)


def test_a_vmstate_declared_over_the_limit_is_refused(hub: Hub, admin_token, images, tmp_path, bomb):
    blob, digest = bomb
    assert len(blob) < 40_000
    pusher = hub.pusher(admin_token)
    bad = with_vmstate(pusher.build_layer("acme/vm", *images[0], tmp_path / "b"), blob, GIB, digest)
    upload_all(pusher, "acme/vm", bad)
    detail = expect_error(put(hub, admin_token, "acme/vm", "v1", bad.manifest), 400, "MANIFEST_INVALID")
    assert detail["limit"] == 512 << 20 and detail["size"] == GIB
    assert count(hub, Manifest) == 0


def test_a_vmstate_inflating_past_its_declared_size_is_refused(hub: Hub, admin_token, images, tmp_path, bomb):
    blob, _ = bomb
    pusher = hub.pusher(admin_token)
    bad = with_vmstate(
        pusher.build_layer("acme/vm", *images[0], tmp_path / "b"), blob, 4096, str(digest_bytes(bytes(4096)))
    )
    upload_all(pusher, "acme/vm", bad)
    r = put(hub, admin_token, "acme/vm", "v1", bad.manifest)
    detail = expect_error(r, 400, "DIGEST_INVALID")
    assert "inflates past its declared 4,096 bytes" in r.json()["errors"][0]["message"]
    assert detail["file"] == "vmstate"
    assert count(hub, Manifest) == 0


def test_a_vmstate_blob_that_is_not_the_configs_vmstate_is_refused(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    other = zstandard.ZstdCompressor().compress(b"another vmstate" * 100)
    bad = dataclasses.replace(layer, vmstate_blob=other).rebuild()
    upload_all(pusher, "acme/vm", bad)
    expect_error(put(hub, admin_token, "acme/vm", "v1", bad.manifest), 400, "DIGEST_INVALID")
    assert count(hub, Manifest) == 0
