"""forkd's own pull flow (registry.json → pack → sha256 → unpack): its refusals.

The happy path runs against a real hub (test_pull_fidelity.py, tests/e2e); here an
httpx.MockTransport serves real pack bytes with a tampered or incomplete registry.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from forkd_client.hub.errors import DigestInvalid, HubError, NotFound
from forkd_client.hub.forkd_registry import pull_from_registry
from forkd_client.store import SnapshotStore

from ..snapshots import make_base_source

REGISTRY = "http://reg.example/registry.json"
PACK_URL = "http://reg.example/packs/py.forkd-snapshot.tar.zst"


@pytest.fixture
def pack_bytes(store, tmp_path) -> bytes:
    src = make_base_source(tmp_path / "src", rootfs=True)
    store.import_snapshot(src, "py")
    (tmp_path / "out").mkdir()
    pack = store.pack("py", tmp_path / "out" / "py.forkd-snapshot.tar.zst")
    store.remove("py")
    return pack.read_bytes()


def serve(pack: bytes, sha: str | None, sidecar: dict[str, bytes] | None = None) -> httpx.Client:
    entry = {"url": PACK_URL, **({"sha256": sha} if sha else {})}
    doc = {"schema_version": 1, "packages": {"acme/py": {"versions": {"latest": entry, "v1": entry}}}}

    def handle(request: httpx.Request) -> httpx.Response:
        if str(request.url) == REGISTRY:
            return httpx.Response(200, content=json.dumps(doc).encode())
        if str(request.url) == PACK_URL:
            return httpx.Response(200, content=pack)
        name = str(request.url).rsplit("/", 1)[-1]
        if sidecar and name in sidecar:
            return httpx.Response(200, content=sidecar[name])
        return httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_a_sha256_mismatch_installs_nothing(store, pack_bytes):
    with serve(pack_bytes, "0" * 64) as http, pytest.raises(DigestInvalid, match="sha256 mismatch"):
        pull_from_registry(store, REGISTRY, "acme/py@v1", http=http)
    assert store.tags() == [] and list((store.root / ".staging").iterdir()) == []


def test_unknown_names_versions_and_targets_are_clear_errors(store, pack_bytes):
    with serve(pack_bytes, None) as http:
        with pytest.raises(NotFound, match="'acme/nope' is not in the registry"):
            pull_from_registry(store, REGISTRY, "acme/nope", http=http)
        with pytest.raises(NotFound, match=r"no version 'v7'.*latest, v1"):
            pull_from_registry(store, REGISTRY, "acme/py@v7", http=http)
        with pytest.raises(HubError, match="owner/name"):
            pull_from_registry(store, REGISTRY, "py", http=http)
        with pytest.raises(HubError, match="--hub"):
            pull_from_registry(store, None, "acme/py", http=http)


def test_a_missing_sidecar_warns_and_a_served_one_is_installed(store, pack_bytes, tmp_path):
    sha = hashlib.sha256(pack_bytes).hexdigest().upper()  # forkd compares case-insensitively
    warnings: list[str] = []
    with serve(pack_bytes, sha) as http:
        [snap] = pull_from_registry(store, REGISTRY, "acme/py", http=http, warnings=warnings)
    assert snap.tag == "py" and len(warnings) == 1 and ".rootfs.zst" in warnings[0]
    sidecars = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.rootfs.zst")}
    with SnapshotStore(tmp_path / "other") as other, serve(pack_bytes, None, sidecars) as http:
        warnings.clear()
        [snap] = pull_from_registry(other, None, PACK_URL, tag="py2", http=http, warnings=warnings)
        doc = json.loads((snap.dir / "snapshot.json").read_text())
        assert warnings == [] and snap.tag == "py2"
        assert Path(doc["rootfs"]).read_bytes() == (tmp_path / "src" / "rootfs.ext4").read_bytes()
