"""Issue 16 item 9: ``forkd-hub verify`` re-hashes what is stored and checks the database against the store.

On a filesystem store and on a real S3 server (SeaweedFS), each on SQLite and PostgreSQL: a
flipped byte in an object, a missing object, a damaged frame inside a pack (and the recipe using
it) and an object without a row are each found; ``--quarantine`` moves them aside and marks them,
deleting nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from hub_server.registry.content.damage import list_marks
from hub_server.registry.core.paths import blob_key, quarantine_key
from hub_server.registry.upkeep.scrub import Scrubber
from manifest.digest import digest_bytes
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import damage_stored_byte

ORPHAN = b"an object nobody committed"


@pytest.fixture(params=["filesystem", "s3"])
def stored_hub(request, make_hub, tmp_path, monkeypatch) -> Hub:
    if request.param == "filesystem":
        return make_hub(f"filesystem root={tmp_path / 'blobs'}")
    seaweedfs = request.getfixturevalue("seaweedfs")
    for name, value in seaweedfs.env.items():
        monkeypatch.setenv(name, value)
    return make_hub(seaweedfs.storage_spec())


def scrub(hub: Hub, **kwargs):
    return hub.call(Scrubber(hub.registry.ctx, grace=timedelta(0), **kwargs).run)


def test_a_clean_hub_verifies(stored_hub: Hub, images, tmp_path):
    stored_hub.pusher(stored_hub.token("admin", "admin")).push_chain("acme/vm", images[:2], tmp_path / "p", "v1")
    report = scrub(stored_hub)
    assert report.clean, report.problems
    assert report.blobs >= 6 and report.recipes >= 2 and report.packs >= 1 and report.frames > 10
    assert report.bytes_hashed > 0


def test_damage_is_found_then_quarantined_never_deleted(stored_hub: Hub, images, tmp_path):
    hub = stored_hub
    layer = hub.pusher(hub.token("admin", "admin")).push_chain("acme/vm", images[:1], tmp_path / "p", "v1")[0]
    ctx, store = hub.registry.ctx, hub.registry.ctx.store
    config = str(digest_bytes(layer.config, "sha256"))
    chunk_map = str(digest_bytes(layer.chunk_map_bytes, "sha256"))
    raw = bytearray(layer.config)
    raw[len(raw) // 2] ^= 0x01
    hub.call(store.put, blob_key(config), bytes(raw))
    hub.call(store.delete, blob_key(chunk_map))
    data_blob = layer.chunk_map.blobs[0]
    victim = next(e for e in layer.chunk_map.entries if e.digest is not None)
    hub.call(damage_stored_byte, ctx, data_blob, victim.offset + 3)
    orphan = blob_key(digest_bytes(ORPHAN, "sha256"))
    hub.call(store.put, orphan, ORPHAN)

    report = scrub(hub)
    found = {(p.kind, p.key) for p in report.problems}
    assert ("digest", blob_key(config)) in found
    assert ("missing", blob_key(chunk_map)) in found
    assert ("digest", blob_key(data_blob)) in found  # the recipe reading the damaged frame
    assert [p.kind for p in report.problems if p.kind == "frame"] == ["frame"]
    assert ("orphan", orphan) in found
    assert len(report.problems) == 5, report.problems
    assert {p.action for p in report.problems} == {"reported"}
    assert hub.call(list_marks, ctx) == []  # a plain verify changes nothing

    report = scrub(hub, quarantine=True)
    actions = {(p.kind, p.key): (p.action, p.moved_to) for p in report.problems}
    assert actions[("digest", blob_key(config))] == ("quarantined", quarantine_key(blob_key(config)))
    assert actions[("orphan", orphan)] == ("quarantined", quarantine_key(orphan))
    assert actions[("missing", blob_key(chunk_map))] == ("marked", None)
    assert hub.call(store.read, quarantine_key(blob_key(config))) == bytes(raw)  # moved aside, not deleted
    assert hub.call(store.read, quarantine_key(orphan)) == ORPHAN
    assert not hub.call(store.exists, orphan)
    marks = {m.key: m for m in hub.call(list_marks, ctx)}
    assert len(marks) == 5 and marks[orphan].moved_to == quarantine_key(orphan)
    assert all(m.reason.startswith("forkd-hub verify: ") for m in marks.values())

    after = {(p.kind, p.key) for p in scrub(hub).problems}  # the quarantined object is now a missing one
    assert ("missing", blob_key(config)) in after and ("orphan", orphan) not in after


def test_a_declared_session_is_no_orphan_and_its_frames_become_the_pack(stored_hub: Hub, images, tmp_path):
    """A session whose recipe was declared (registry/push/upload_verify.py), verified part by part: no
    orphan while open; finished, its frames are a pack that verifies (filesystem and S3)."""
    from hub_server.registry.core.paths import session_pack_key
    from tests.hub_server.registry.push.test_upload_verify import Session, _inline_bytes, _one_blob, _recipe

    admin = stored_hub.token("admin", "admin")
    blob = _one_blob(stored_hub, admin, images, tmp_path)
    session = Session(stored_hub, admin)
    assert session.declare(_recipe(blob)).status_code == 202
    payload = _inline_bytes(blob)
    cut = blob.frames[2].offset
    assert session.patch(payload[:cut]).status_code == 202
    report = scrub(stored_hub)
    assert report.clean, report.problems
    assert session.patch(payload[cut:]).status_code == 202
    assert session.finish(_recipe(blob)).status_code == 201
    report = scrub(stored_hub)
    assert report.clean and report.packs == 1 and report.frames == len(blob.frames), report.problems
    assert stored_hub.pusher(admin).blob("acme/vm", blob.digest) == blob.path.read_bytes()
    assert stored_hub.call(stored_hub.registry.ctx.store.exists, session_pack_key(session.uuid))
