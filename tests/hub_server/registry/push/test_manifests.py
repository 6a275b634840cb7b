"""Manifest pushes through the app: every verification step fails with its typed error, nothing partial stays."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest
from sqlmodel import select

from hub_server.db.models import Chunk, Manifest, Repository
from hub_server.settings import Limits
from manifest import mediatypes as mt
from manifest.digest import digest_bytes
from manifest.model import Descriptor, LayerConfig, ParentRef, chain_index
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error


def count(hub: Hub, model) -> int:
    async def go():
        async with hub.registry.ctx.sessions() as session:
            return len((await session.exec(select(model))).all())

    return hub.call(go)


def upload_all(pusher, repo, layer) -> None:
    for digest, path in layer.data_blobs.items():
        pusher.ensure_blob(repo, path.read_bytes(), digest)
    for digest, data in layer.small_blobs.items():
        pusher.ensure_blob(repo, data, digest)


def put(hub: Hub, token: str, repo: str, ref: str, body: bytes, **params):
    return hub.client.put(
        f"/v2/{repo}/manifests/{ref}",
        content=body,
        params=params,
        headers={**auth(token), "Content-Type": mt.OCI_MANIFEST},
    )


@pytest.mark.parametrize("corruption", ["swapped-chunks", "flipped-byte", "trailing-bytes"])
def test_corrupted_data_blob_is_rejected_naming_the_chunk(hub: Hub, admin_token, images, tmp_path, corruption):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    cm = layer.chunk_map
    entries = list(cm.entries)
    data = [i for i, e in enumerate(entries) if e.digest is not None]
    if corruption == "swapped-chunks":
        # Valid frames, but the map names chunk A's digest at chunk B's frame.
        a, b = data[1], data[2]
        entries[a] = replace(entries[a], digest=entries[b].digest)
        bad = layer.rebuild(chunk_map=replace(cm, entries=tuple(entries)))
        victim = entries[a]
    else:
        ((_blob_digest, path),) = layer.data_blobs.items()
        raw = bytearray(path.read_bytes())
        if corruption == "flipped-byte":
            victim = entries[data[3]]
            raw[victim.offset + victim.length // 2] ^= 0xFF
        else:  # issue 16 item 6: bytes after a valid frame, inside its entry's length, are refused
            last = max(data, key=lambda i: entries[i].offset)
            assert entries[last].offset + entries[last].length == len(raw)
            raw += b"unverified trailing bytes"
            entries[last] = victim = replace(entries[last], length=entries[last].length + 25)
            cm = replace(cm, entries=tuple(entries))
        new_digest = str(digest_bytes(bytes(raw), "sha256"))
        new_path = path.with_name(new_digest.replace(":", "-"))
        new_path.write_bytes(bytes(raw))
        bad = layer.rebuild(chunk_map=replace(cm, blobs=(new_digest,)), data_blobs={new_digest: new_path})
    upload_all(pusher, "acme/vm", bad)

    r = put(hub, admin_token, "acme/vm", "v1", bad.manifest)

    detail = expect_error(r, 400, "DIGEST_INVALID")
    assert detail["chunk"] == victim.index and detail["offset"] == victim.offset
    assert detail["blob"] == bad.chunk_map.blobs[0] and detail["file"] == "memory.bin"
    assert count(hub, Manifest) == 0 and count(hub, Chunk) == 0
    expect_error(
        hub.client.get(f"/v2/acme/vm/manifests/{bad.digest}", headers=auth(admin_token)), 404, "MANIFEST_UNKNOWN"
    )
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1", headers=auth(admin_token)), 404, "MANIFEST_UNKNOWN")


def test_missing_blobs_are_all_listed(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    config_digest = str(digest_bytes(layer.config))
    pusher.ensure_blob("acme/vm", layer.config, config_digest)  # only the config arrives
    detail = expect_error(put(hub, admin_token, "acme/vm", "v1", layer.manifest), 400, "MANIFEST_BLOB_UNKNOWN")
    assert sorted(detail["blobs"]) == sorted({*layer.small_blobs, *layer.data_blobs} - {config_digest})
    assert count(hub, Manifest) == 0


def test_manifest_over_the_size_limit_is_413(hub: Hub, admin_token):
    body = b"{" + b" " * (4 << 20) + b"}"  # the default limit is 4 MiB (distribution-spec: at least 4 MiB)
    detail = expect_error(put(hub, admin_token, "acme/vm", "v1", body), 413, "TOO_LARGE")
    assert detail["limit"] == 4 << 20


def test_chain_deeper_than_the_limit_is_refused(make_hub, images, tmp_path):
    hub = make_hub(limits=replace(Limits(), chain_depth=2))
    token = hub.token("admin", "admin")
    pusher = hub.pusher(token)
    base = pusher.build_layer("acme/vm", *images[0], tmp_path / "0")
    pusher.push_layer("acme/vm", base)
    child = pusher.build_layer("acme/vm", *images[1], tmp_path / "1", base)
    pusher.push_layer("acme/vm", child)
    grandchild = pusher.build_layer("acme/vm", *images[2], tmp_path / "2", child)
    upload_all(pusher, "acme/vm", grandchild)
    detail = expect_error(put(hub, token, "acme/vm", "v3", grandchild.manifest), 400, "CHAIN_TOO_DEEP")
    assert detail["limit"] == 2
    assert count(hub, Manifest) == 2


def test_parent_must_exist_and_be_readable(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    base = pusher.build_layer("alice/private", *images[0], tmp_path / "0")
    pusher.push_layer("alice/private", base, "base")
    child = pusher.build_layer("alice/private", *images[1], tmp_path / "1", base)

    # Bob may push to bob/* but cannot read alice/private: its parent is unknown to him.
    bob = hub.token("bob", "push:bob/*")
    upload_all(hub.pusher(bob), "bob/vm", child)
    r = put(hub, bob, "bob/vm", "v1", child.manifest)
    detail = expect_error(r, 400, "PARENT_UNKNOWN")
    assert detail["digest"] == base.digest

    # A parent that does not exist at all.
    config = LayerConfig.from_json(child.config)
    ghost = "sha256:" + "0" * 64
    orphan = child.rebuild(config=dataclasses.replace(config, parent=ParentRef(ghost, None)).to_json())
    upload_all(pusher, "alice/private", orphan)
    detail = expect_error(put(hub, admin_token, "alice/private", "v2", orphan.manifest), 400, "PARENT_UNKNOWN")
    assert detail["digest"] == ghost


def test_invalid_documents_are_named(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    expect_error(put(hub, admin_token, "acme/vm", "v1", b"not json"), 400, "MANIFEST_INVALID")
    detail = expect_error(
        put(hub, admin_token, "acme/vm", "v1", b'{"schemaVersion": 2, "mediaType": "x"}'), 400, "MANIFEST_INVALID"
    )
    assert detail == {"field": "mediaType"}  # Content-Type says OCI manifest, the body says otherwise
    base = pusher.build_layer("acme/vm", *images[0], tmp_path / "0")
    pusher.push_layer("acme/vm", base)
    child = pusher.build_layer("acme/vm", *images[1], tmp_path / "1", base)
    wrong_parent = child.rebuild(chunk_map=replace(child.chunk_map, parent_digest="blake3:" + "1" * 64))
    upload_all(pusher, "acme/vm", wrong_parent)
    r = put(hub, admin_token, "acme/vm", "v2", wrong_parent.manifest)
    assert "parentDigest" in r.json()["errors"][0]["message"]
    assert expect_error(r, 400, "MANIFEST_INVALID")["field"] == "parentDigest"

    config = json.loads(child.config)
    config["files"]["memory.bin"]["size"] += 1
    bad_config = child.rebuild(config=json.dumps(config).encode())
    upload_all(pusher, "acme/vm", bad_config)
    expect_error(put(hub, admin_token, "acme/vm", "v3", bad_config.manifest), 400, "MANIFEST_INVALID")
    utf16 = put(hub, admin_token, "acme/vm", "v4", base.manifest.decode().encode("utf-16"))
    assert "UTF-8" in utf16.json()["errors"][0]["message"]
    expect_error(utf16, 400, "MANIFEST_INVALID")
    expect_error(put(hub, admin_token, "acme/vm", "bad tag!", base.manifest), 400, "NAME_INVALID")
    expect_error(put(hub, admin_token, "Acme/vm", "v1", base.manifest), 400, "NAME_INVALID")


def test_descriptor_size_must_match_the_blob(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "0")
    upload_all(pusher, "acme/vm", layer)
    manifest = json.loads(layer.manifest)
    manifest["layers"][0]["size"] += 1
    detail = expect_error(put(hub, admin_token, "acme/vm", "v1", json.dumps(manifest).encode()), 400, "SIZE_INVALID")
    assert detail["digest"] == manifest["layers"][0]["digest"]


def test_digest_reference_must_match_the_bytes(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "0")
    upload_all(pusher, "acme/vm", layer)
    detail = expect_error(put(hub, admin_token, "acme/vm", "sha256:" + "2" * 64, layer.manifest), 400, "DIGEST_INVALID")
    assert detail["actual"] == layer.digest


def test_exact_bytes_are_stored_and_served(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "0")
    upload_all(pusher, "acme/vm", layer)
    pretty = json.dumps(json.loads(layer.manifest), indent=3).encode()  # not our canonical form
    sha = str(digest_bytes(pretty, "sha256"))
    r = put(hub, admin_token, "acme/vm", sha, pretty)
    assert r.status_code == 201 and r.headers["Docker-Content-Digest"] == sha
    assert r.headers["Location"] == f"/v2/acme/vm/manifests/{sha}"
    r = put(hub, admin_token, "acme/vm", "latest", layer.manifest)
    assert r.headers["Docker-Content-Digest"] == layer.digest  # blake3 for a tag

    got = hub.client.get("/v2/acme/vm/manifests/latest", headers=auth(admin_token))
    assert got.content == layer.manifest and got.headers["Content-Type"] == mt.OCI_MANIFEST
    assert got.headers["Docker-Content-Digest"] == layer.digest
    assert hub.client.get(f"/v2/acme/vm/manifests/{sha}", headers=auth(admin_token)).content == pretty
    head = hub.client.head(f"/v2/acme/vm/manifests/{sha}", headers=auth(admin_token))
    assert head.status_code == 200 and head.headers["Content-Length"] == str(len(pretty))
    assert head.headers["Docker-Content-Digest"] == sha and head.content == b""


def test_first_push_creates_the_repository_private_unless_public(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/priv", *images[0], tmp_path / "0")
    pusher.push_layer("acme/priv", layer, "v1")
    pusher.push_layer("acme/pub", layer, "v1", public=True, mount_from="acme/priv")
    expect_error(hub.client.get("/v2/acme/priv/manifests/v1"), 401, "UNAUTHORIZED")  # anonymous: authenticate
    assert hub.client.get("/v2/acme/pub/manifests/v1").content == layer.manifest
    # ?public=true on a later push does not flip an existing repository
    pusher.push_layer("acme/priv", layer, "v2", public=True)

    async def public_flags():
        async with hub.registry.ctx.sessions() as session:
            return {r.full_name: r.public for r in (await session.exec(select(Repository))).all()}

    assert hub.call(public_flags) == {"acme/priv": False, "acme/pub": True}


def test_chain_index_keeps_the_chain_together(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layers = pusher.push_chain("acme/vm", images, tmp_path / "push", "head")
    descriptors = [
        Descriptor(mt.OCI_MANIFEST, x.digest, len(x.manifest), artifact_type=mt.LAYER_ARTIFACT) for x in layers
    ]
    index = chain_index(descriptors)
    r = pusher.put_manifest("acme/vm", "chain", index, media_type=mt.OCI_INDEX)
    assert r.headers["Docker-Content-Digest"] == str(digest_bytes(index, "sha256"))
    got = hub.client.get("/v2/acme/vm/manifests/chain", headers=auth(admin_token))
    assert got.content == index and got.headers["Content-Type"] == mt.OCI_INDEX
    chain = hub.client.get("/api/v1/repositories/acme/vm/chain/chain", headers=auth(admin_token)).json()
    assert [x["digest"] for x in chain["chain"]] == [x.digest for x in layers]

    out_of_order = chain_index(list(reversed(descriptors)))
    expect_error(
        pusher.http.put(
            "/v2/acme/vm/manifests/bad",
            content=out_of_order,
            headers={**auth(admin_token), "Content-Type": mt.OCI_INDEX},
        ),
        400,
        "MANIFEST_INVALID",
    )
    unknown = chain_index([Descriptor(mt.OCI_MANIFEST, "blake3:" + "3" * 64, 10, artifact_type=mt.LAYER_ARTIFACT)])
    detail = expect_error(
        pusher.http.put(
            "/v2/acme/vm/manifests/bad", content=unknown, headers={**auth(admin_token), "Content-Type": mt.OCI_INDEX}
        ),
        400,
        "MANIFEST_BLOB_UNKNOWN",
    )
    assert detail["blobs"] == ["blake3:" + "3" * 64]


def test_repush_is_idempotent_and_moves_tags(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    base = pusher.build_layer("acme/vm", *images[0], tmp_path / "0")
    pusher.push_layer("acme/vm", base, "latest")
    child = pusher.build_layer("acme/vm", *images[1], tmp_path / "1", base)
    pusher.push_layer("acme/vm", child, "latest")
    pusher.put_manifest("acme/vm", "latest", child.manifest)
    got = hub.client.get("/v2/acme/vm/manifests/latest", headers=auth(admin_token))
    assert got.headers["Docker-Content-Digest"] == child.digest
    assert count(hub, Manifest) == 2
