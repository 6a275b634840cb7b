"""End to end through the real app in-process: push a 3-link chain, pull it back byte-identically."""

from __future__ import annotations

from manifest import mediatypes as mt
from tests.hub_server.conftest import Hub
from tests.manifest.images import same_bytes


def test_push_three_link_chain_and_pull_it_back(hub: Hub, admin_token: str, images, tmp_path):
    pusher = hub.pusher(admin_token)
    layers = pusher.push_chain("acme/py", images, tmp_path / "push", "head")

    pulled = pusher.pull("acme/py", "head", tmp_path / "pull")

    assert len(pulled) == 3
    for (memory, vmstate), (original, original_vmstate) in zip(pulled, images, strict=True):
        assert same_bytes(memory, original)
        assert vmstate == original_vmstate
    chain = hub.client.get(
        "/api/v1/repositories/acme/py/chain/head", headers={"Authorization": f"Bearer {admin_token}"}
    ).json()
    assert [link["digest"] for link in chain["chain"]] == [layer.digest for layer in layers]
    assert chain["digest"] == layers[-1].digest
    assert chain["chain"][-1]["tags"] == ["head"]
    assert [link["config"].encode() for link in chain["chain"]] == [layer.config for layer in layers]


def test_pushes_and_tags_are_audited(hub: Hub, images, tmp_path):
    token = hub.token("ci", "push:acme/*")
    layers = hub.pusher(token).push_chain("acme/py", images[:2], tmp_path / "push", "head")
    events = list(reversed(hub.call(hub.registry.ctx.audit.query, repository="acme/py")))
    assert [(e["actor"], e["action"], e["reference"], e["digest"]) for e in events] == [
        ("ci", "push", layers[0].digest, layers[0].digest),
        ("ci", "push", layers[1].digest, layers[1].digest),
        ("ci", "tag", "head", layers[1].digest),
    ]
    # format v2: every frame was verified when its data blob's recipe was ingested, none is left for the manifest
    frames = sum(1 for e in layers[0].chunk_map.entries if e.digest is not None)
    assert events[0]["detail"] == {"mediaType": mt.OCI_MANIFEST, "newChunks": 0, "reusedChunks": frames}
    assert events[0]["remote"] == "testclient"
