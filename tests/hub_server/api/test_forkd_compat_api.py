"""``GET /registry.json`` and ``GET /packs/…``: what an unmodified ``forkd pull --hub`` sees."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from hub_server.registry.forkd.compat import PACKS_PREFIX, pack_info_key, pack_key
from manifest import mediatypes as mt
from manifest.forkd_unpack import read_pack
from manifest.model import Descriptor, chain_index
from tests.e2e.hubproc import HubProcess
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import (
    CREATED,
    PushClient,
    auth,
    chain_images,
    damage_stored_byte,
    expect_error,
)
from tests.manifest.images import same_bytes

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
VERSION_KEYS = {"url", "sha256", "size_bytes", "memory_mib", "created_at", "base_image"}


def check_forkd_registry(doc: dict) -> dict:
    """The rules forkd's ``Registry`` deserializer and docs/HUB.md impose; returns ``packages``."""
    assert doc["schema_version"] == 1
    packages = doc["packages"]
    assert isinstance(packages, dict)
    for name, package in packages.items():
        assert "/" in name and " " not in name, name
        assert isinstance(package.get("description", ""), str)
        versions = package["versions"]
        assert "latest" in versions, f"{name} has no latest version"
        for version, entry in versions.items():
            assert set(entry) <= VERSION_KEYS, (name, version, entry)
            url = urlsplit(entry["url"])
            assert url.scheme in ("http", "https") and url.netloc, entry["url"]
            assert url.path.endswith(".forkd-snapshot.tar.zst")
            # never without sha256: forkd's pull would skip its integrity check
            assert SHA256_HEX.fullmatch(entry["sha256"]), entry["sha256"]
            assert isinstance(entry["size_bytes"], int) and entry["size_bytes"] > 0
            assert isinstance(entry["memory_mib"], int) and entry["memory_mib"] > 0
            assert RFC3339.fullmatch(entry["created_at"])
    return packages


def registry(hub: Hub, **headers: str) -> dict:
    r = hub.client.get("/registry.json", headers=headers)
    assert r.status_code == 200, r.text
    return check_forkd_registry(r.json())


def unpack(data: bytes, staging: Path):
    staging.mkdir(parents=True)
    return read_pack(io.BytesIO(data), staging)


@pytest.fixture
def published(hub: Hub, images, tmp_path):
    """acme/vm (public): ``v1`` a base, ``v2`` a 2-link chain; acme/secret (private): ``v1``."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layers = pusher.push_chain("acme/vm", images[:2], tmp_path / "p", "v2", public=True)
    pusher.put_manifest("acme/vm", "v1", layers[0].manifest)  # tagged last: the most recently updated
    pusher.push_chain("acme/secret", images[:1], tmp_path / "s", "v1")
    return admin, layers


def test_registry_json_lists_public_tags_and_a_latest(hub: Hub, published, images, tmp_path):
    admin, layers = published
    packages = registry(hub)
    assert list(packages) == ["acme/vm"]  # the private repository is not listed, even to an admin
    assert list(registry(hub, Authorization=f"Bearer {admin}")) == ["acme/vm"]
    versions = packages["acme/vm"]["versions"]
    assert set(versions) == {"v1", "v2", "latest"}
    # the immutable URL of the manifest the tag names (a tag moved after the listing leaves it true)
    assert versions["v2"]["url"] == f"http://testserver.local/packs/acme/vm/@{layers[1].digest}.forkd-snapshot.tar.zst"
    assert versions["latest"] == versions["v1"]  # no latest tag: the most recently updated tag
    assert versions["v1"]["memory_mib"] == 4 and versions["v1"]["created_at"] == CREATED
    pack = hub.client.get(versions["v2"]["url"]).content  # built for the listing, served as listed
    assert versions["v2"]["sha256"] == hashlib.sha256(pack).hexdigest() and versions["v2"]["size_bytes"] == len(pack)

    hub.pusher(admin).put_manifest("acme/vm", "v3", layers[1].manifest)
    assert registry(hub)["acme/vm"]["versions"]["latest"] == registry(hub)["acme/vm"]["versions"]["v3"]
    hub.pusher(admin).put_manifest("acme/vm", "latest", layers[0].manifest)
    versions = registry(hub)["acme/vm"]["versions"]
    assert versions["latest"]["url"].endswith(f"/@{layers[0].digest}.forkd-snapshot.tar.zst")  # a real latest wins

    hub.client.patch("/api/v1/repositories/acme/vm", json={"description": "a tiny VM"}, headers=auth(admin))
    assert registry(hub)["acme/vm"]["description"] == "a tiny VM"


def test_pull_counts_count_what_a_user_calls_a_pull(hub: Hub, published):
    """Issue 30 item 2: fetching /registry.json built (and counted) a pull of every repository in it."""
    admin, _ = published

    def pulls() -> int:
        r = hub.client.get("/api/v1/repositories/acme/vm", headers=auth(admin))
        assert r.status_code == 200, r.text
        return r.json()["pullCount"]

    assert pulls() == 0
    versions = registry(hub)["acme/vm"]["versions"]  # builds every pack it lists
    registry(hub)
    assert pulls() == 0  # reading the registry is not a pull
    hub.client.get(versions["v2"]["url"])  # forkd's pull: one pack download
    assert pulls() == 1
    assert hub.client.get("/api/v1/repositories/acme/vm/chain/v2").status_code == 200  # forkd pull: one chain
    assert pulls() == 2
    assert hub.client.get("/api/v1/repositories/acme/vm/lineage/v2").status_code == 200  # a look is not a pull
    assert hub.client.get("/v2/acme/vm/manifests/v2").status_code == 200
    assert pulls() == 2


def test_packs_hold_the_pushed_files(hub: Hub, published, images, tmp_path):
    _, layers = published
    versions = registry(hub)["acme/vm"]["versions"]
    base = hub.client.get(versions["v1"]["url"])
    chain = hub.client.get(versions["v2"]["url"])
    assert base.status_code == chain.status_code == 200
    assert chain.headers["content-type"] == "application/zstd"
    assert int(chain.headers["content-length"]) == len(chain.content)

    v1 = unpack(base.content, tmp_path / "v1")
    assert v1.version == 1 and [link.tag for link in v1.links] == ["vm"]
    assert same_bytes(v1.links[0].directory / "memory.bin", images[0][0])
    assert (v1.links[0].directory / "vmstate").read_bytes() == images[0][1]
    assert json.loads((v1.links[0].directory / "snapshot.json").read_text()) == {
        "vmstate": str(v1.links[0].directory / "vmstate"),
        "memory": str(v1.links[0].directory / "memory.bin"),
        "volumes": [],
    }

    v2 = unpack(chain.content, tmp_path / "v2")
    assert v2.version == 2 and v2.tag == "vm" and len(v2.links) == 2
    root, head = v2.links
    for link, (memory, vmstate) in zip(v2.links, images[:2], strict=True):
        assert same_bytes(link.directory / "memory.bin", memory)
        assert (link.directory / "vmstate").read_bytes() == vmstate
    memory_sha = hashlib.sha256(images[0][0].read_bytes()).hexdigest()
    config = json.loads(layers[0].config)
    assert root.parent_tag is None and head.parent_tag == root.tag
    assert head.parent_content_hash == memory_sha == config["files"]["memory.bin"]["sha256"].removeprefix("sha256:")
    snapshot = json.loads((head.directory / "snapshot.json").read_text())
    assert (snapshot["parent_tag"], snapshot["parent_content_hash"]) == (root.tag, memory_sha)

    again = hub.client.get(versions["v2"]["url"])
    assert again.content == chain.content
    listed = registry(hub)["acme/vm"]["versions"]
    for tag, response in (("v1", base), ("v2", chain)):
        assert listed[tag]["sha256"] == hashlib.sha256(response.content).hexdigest()
        assert listed[tag]["size_bytes"] == len(response.content)
        assert response.headers["x-checksum-sha256"] == listed[tag]["sha256"]


def test_pack_references(hub: Hub, published, tmp_path):
    admin, layers = published
    by_tag = hub.client.get("/packs/acme/vm/v2.forkd-snapshot.tar.zst").content
    for ref in (f"@{layers[1].digest}", layers[1].digest):
        assert hub.client.get(f"/packs/acme/vm/{ref}.forkd-snapshot.tar.zst").content == by_tag
    expect_error(hub.client.get("/packs/acme/vm/v2.tar.zst"), 404, "NOT_FOUND")
    expect_error(hub.client.get("/packs/acme/vm/.forkd-snapshot.tar.zst"), 404, "NOT_FOUND")
    expect_error(hub.client.get("/packs/acme/vm/nope.forkd-snapshot.tar.zst"), 404, "MANIFEST_UNKNOWN")
    expect_error(hub.client.get("/packs/ACME/vm/v2.forkd-snapshot.tar.zst"), 400, "NAME_INVALID")
    expect_error(hub.client.get("/packs/acme/vm/@sha256:zz.forkd-snapshot.tar.zst"), 400, "DIGEST_INVALID")

    # a tag on a chain index packs the chain's head, the same bytes as the head's own tag
    index = chain_index(
        [Descriptor(mt.OCI_MANIFEST, x.digest, len(x.manifest), artifact_type=mt.LAYER_ARTIFACT) for x in layers]
    )
    hub.pusher(admin).put_manifest("acme/vm", "chain", index, media_type=mt.OCI_INDEX)
    entry = registry(hub)["acme/vm"]["versions"]["chain"]
    assert entry["sha256"] == hashlib.sha256(by_tag).hexdigest()
    assert hub.client.get(entry["url"]).content == by_tag


def test_private_repositories_are_not_served(hub: Hub, published, tmp_path):
    url = "/packs/acme/secret/v1.forkd-snapshot.tar.zst"
    expect_error(hub.client.get(url), 401, "UNAUTHORIZED")  # anonymous: authenticate (as for a missing one)
    expect_error(hub.client.get("/packs/acme/nothing/v1.forkd-snapshot.tar.zst"), 401, "UNAUTHORIZED")
    reader = hub.token("reader", "pull:acme/secret")
    r = hub.client.get(url, headers=auth(reader))
    assert r.status_code == 200 and unpack(r.content, tmp_path / "staging").version == 1
    expect_error(hub.client.get(url), 401, "UNAUTHORIZED")  # built now, still hidden
    outsider = hub.token("outsider", "pull:other/*")
    expect_error(hub.client.get(url, headers=auth(outsider)), 404, "NAME_UNKNOWN")
    assert "acme/secret" not in registry(hub, Authorization=f"Bearer {reader}")
    expect_error(hub.client.get("/registry.json", headers=auth("forkd_bogus")), 401, "UNAUTHORIZED")


def test_a_damaged_chunk_is_a_clear_error_and_nothing_is_cached(hub: Hub, images, tmp_path):
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layers = pusher.push_chain("acme/dmg", images[:2], tmp_path / "p", "v2")  # private: no pack built at push
    pusher.put_manifest("acme/dmg", "v1", layers[0].manifest)
    victim = next(e for e in layers[1].chunk_map.entries if e.digest is not None)
    blob = layers[1].chunk_map.blobs[victim.blob]
    hub.call(damage_stored_byte, hub.registry.ctx, blob, victim.offset + victim.length - 1)
    hub.client.patch("/api/v1/repositories/acme/dmg", json={"public": True}, headers=auth(admin))

    detail = expect_error(hub.client.get("/packs/acme/dmg/v2.forkd-snapshot.tar.zst"), 500, "INTERNAL")
    assert detail == {"digest": layers[1].digest, "damaged": True}
    # issue 16 item 1: the failure is marked once; the next answer comes from the mark, same message
    message = hub.client.get("/packs/acme/dmg/v2.forkd-snapshot.tar.zst").json()["errors"][0]["message"]
    assert f"memory.bin chunk {victim.index}" in message and "damaged" in message
    assert "v2" not in registry(hub)["acme/dmg"]["versions"]  # never listed without its sha256

    async def keys() -> list[str]:
        return [k async for k in hub.registry.ctx.store.list(PACKS_PREFIX)]

    damaged = {pack_key("acme/dmg", layers[1].digest), pack_info_key("acme/dmg", layers[1].digest)}
    assert damaged.isdisjoint(hub.call(keys))  # nothing of the damaged pack is cached (v1's was built)
    assert hub.client.get("/packs/acme/dmg/v1.forkd-snapshot.tar.zst").status_code == 200  # the base is intact


def test_a_tag_pushed_to_a_public_repository_has_its_pack_built_at_push(hub: Hub, images, tmp_path):
    """registry.json answers at once after a push: the pack was built when the tag was pushed (after the push's
    answer), not while the listing is answered; a private repository's manifests are not built."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layers = pusher.push_chain("acme/fast", images[:2], tmp_path / "p", "v1", public=True)
    hidden = pusher.push_chain("acme/hidden", images[:1], tmp_path / "h", "v1")

    async def keys() -> set[str]:
        return {k async for k in hub.registry.ctx.store.list(PACKS_PREFIX)}

    built = hub.call(keys)
    assert pack_key("acme/fast", layers[1].digest) in built and pack_info_key("acme/fast", layers[1].digest) in built
    assert not any(k.startswith(f"{PACKS_PREFIX}/acme/hidden/") for k in built)
    entry = registry(hub)["acme/fast"]["versions"]["v1"]
    assert hub.call(keys) == built  # the listing built nothing
    assert hashlib.sha256(hub.client.get(entry["url"]).content).hexdigest() == entry["sha256"]
    assert hidden[0].digest


def test_urls_use_the_public_url(make_hub, images, tmp_path):
    hub = make_hub(public_url="https://hub.example.com/forkd")
    hub.pusher(hub.token("admin", "admin")).push_chain("acme/vm", images[:1], tmp_path / "p", "v1", public=True)
    entry = registry(hub)["acme/vm"]["versions"]["latest"]
    assert re.fullmatch(
        r"https://hub\.example\.com/forkd/packs/acme/vm/@sha256:[0-9a-f]{64}\.forkd-snapshot\.tar\.zst", entry["url"]
    )


# -- an unmodified forkd client's pull flow against a real server ------------------------------


def forkd_pull(registry_url: str, target: str, tmp_path: Path) -> tuple[dict, bytes]:
    """forkd-formats.md §4.2: fetch registry.json fresh, pick the version (default latest), GET its
    url (status must be 200), compare sha256 case-insensitively when given, return the pack."""
    name, _, version = target.partition("@")
    with httpx.Client(timeout=60, follow_redirects=True) as http:
        r = http.get(registry_url)
        assert r.status_code == 200
        entry = r.json()["packages"][name]["versions"][version or "latest"]
        pack = http.get(entry["url"])
        assert pack.status_code == 200
    if entry.get("sha256"):
        assert hashlib.sha256(pack.content).hexdigest().lower() == entry["sha256"].lower(), "sha256 mismatch"
    return entry, pack.content


@pytest.mark.slow
def test_forkd_pull_flow_against_a_real_server(tmp_path: Path):
    images = chain_images(tmp_path)
    hub = HubProcess(tmp_path / "data", tmp_path / "serve.log")
    try:
        token = hub.token("e2e", "push:acme/*")
        url = hub.url
        with httpx.Client(base_url=url, timeout=30) as http:
            layers = PushClient(http, token).push_chain("acme/vm", images, tmp_path / "push", "v1", public=True)
        first, pack = forkd_pull(f"{url}/registry.json", "acme/vm", tmp_path)
        assert first["url"] == f"{url}/packs/acme/vm/@{layers[-1].digest}.forkd-snapshot.tar.zst"
        assert first["sha256"] == hashlib.sha256(pack).hexdigest()  # listed only with it: forkd checks it
        again, same = forkd_pull(f"{url}/registry.json", "acme/vm@v1", tmp_path)
        assert same == pack and again["sha256"] == hashlib.sha256(pack).hexdigest()
        # v1 moved between forkd's registry fetch and its download: the listed URL still gives the listed pack
        with httpx.Client(base_url=url, timeout=30) as http:
            PushClient(http, token).put_manifest("acme/vm", "v1", layers[0].manifest)
            assert http.get(first["url"]).content == pack
            moved = http.get("/registry.json").json()["packages"]["acme/vm"]["versions"]["v1"]
            assert moved["url"] == f"{url}/packs/acme/vm/@{layers[0].digest}.forkd-snapshot.tar.zst"
            assert moved["sha256"] == hashlib.sha256(http.get(moved["url"]).content).hexdigest() != first["sha256"]
        unpacked = unpack(pack, tmp_path / "staging")
        assert unpacked.version == 2 and [link.tag for link in unpacked.links][-1] == "vm"
        for link, (memory, vmstate) in zip(unpacked.links, images, strict=True):
            assert same_bytes(link.directory / "memory.bin", memory)
            assert (link.directory / "vmstate").read_bytes() == vmstate
        assert list((hub.data_dir / "tmp").iterdir()) == []
    finally:
        code = hub.stop()
    assert code == 0, (tmp_path / "serve.log").read_text()[-2000:]
