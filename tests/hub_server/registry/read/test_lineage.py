"""Chain and lineage endpoints: ancestors, dependents, sizes."""

from __future__ import annotations

import os

from manifest.diff import diff_files
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import CHUNK, auth, expect_error


def changed_bytes(parent, child) -> int:
    size = os.path.getsize(child)
    return sum(min(CHUNK, size - c.index * CHUNK) for c in diff_files(parent, child, CHUNK))


def test_lineage_of_a_middle_link(hub: Hub, images, tmp_path):
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layers = pusher.push_chain("acme/vm", images, tmp_path / "p", "head")
    pusher.put_manifest("acme/vm", "base", layers[0].manifest)
    pusher.push_layer("acme/fork", layers[2], "copy", mount_from="acme/vm")

    r = hub.client.get(f"/api/v1/repositories/acme/vm/lineage/{layers[1].digest}", headers=auth(admin))
    lineage = r.json()

    assert lineage["digest"] == layers[1].digest and lineage["depth"] == 2
    assert lineage["ancestors"] == [{"digest": layers[0].digest, "repository": "acme/vm", "tags": ["base"]}]
    assert lineage["dependents"] == [
        {"repository": "acme/fork", "tag": "copy", "digest": layers[2].digest},
        {"repository": "acme/vm", "tag": "head", "digest": layers[2].digest},
    ]
    (m0, _), (m1, v1) = images[0], images[1]
    assert lineage["logicalSize"] == os.path.getsize(m1) + len(v1)
    assert lineage["storedSize"] == sum(p.stat().st_size for p in layers[1].data_blobs.values()) > 0
    assert lineage["sharedWithParent"] == os.path.getsize(m1) - changed_bytes(m0, m1)

    base = hub.client.get("/api/v1/repositories/acme/vm/lineage/base", headers=auth(admin)).json()
    assert base["depth"] == 1 and base["ancestors"] == [] and base["sharedWithParent"] == 0
    assert {d["tag"] for d in base["dependents"]} == {"head", "copy"}


def test_a_pushed_chain_is_pullable_through_the_child_repository(hub: Hub, images, tmp_path):
    """Pushing a child into another repository links the chain below it there too."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    base = pusher.build_layer("lib/base", *images[0], tmp_path / "b")
    pusher.push_layer("lib/base", base, "v1")
    child = pusher.build_layer("team/app", *images[1], tmp_path / "c", base)
    pusher.push_layer("team/app", child, "v1")
    reader = hub.token("reader", "pull:team/*")  # cannot read lib/base
    chain = hub.client.get("/api/v1/repositories/team/app/chain/v1", headers=auth(reader)).json()
    assert [(x["digest"], x["repository"]) for x in chain["chain"]] == [
        (base.digest, "team/app"),
        (child.digest, "team/app"),
    ]
    assert hub.pusher(reader).pull("team/app", "v1", tmp_path / "pull")


def test_unknown_references(hub: Hub):
    admin = hub.token("admin", "admin")
    hub.client.post("/v2/acme/vm/blobs/uploads/", headers=auth(admin))
    expect_error(
        hub.client.get("/api/v1/repositories/acme/vm/chain/nope", headers=auth(admin)), 404, "MANIFEST_UNKNOWN"
    )
    expect_error(
        hub.client.get("/api/v1/repositories/acme/vm/lineage/sha256:zz", headers=auth(admin)), 400, "DIGEST_INVALID"
    )
