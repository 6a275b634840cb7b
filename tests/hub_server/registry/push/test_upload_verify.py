"""A data blob's recipe declared up front: its frames are verified by the PATCHes that carry them.

Lying pushes are refused with the same typed errors whether the recipe was declared first (at
the PATCH that carries the bad bytes, or at the finish for what only the finish can tell) or
only given at the finish (the whole session verified there).
"""

from __future__ import annotations

import pytest
from sqlmodel import select

from hub_server.db.models import Blob, Frame, Pack, UploadRecipe
from hub_server.registry.core.paths import session_pack_key
from manifest import mediatypes as mt
from manifest.layer import DataBlob
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, check, expect_error


def _one_blob(hub: Hub, token: str, images, tmp_path, repo: str = "acme/vm") -> DataBlob:
    layer = hub.pusher(token).build_layer(repo, *images[0], tmp_path / "layer")
    (blob,) = layer.frames.values()
    assert len(blob.frames) >= 4
    return blob


def _recipe(blob: DataBlob, held: frozenset[str] = frozenset(), **override) -> dict:
    doc = {
        "mediaType": mt.RECIPE,
        "digest": blob.digest,
        "size": blob.size,
        "frames": [[f.digest, f.chunk, f.raw_length, f.length, f.digest not in held] for f in blob.frames],
    }
    doc.update(override)
    return doc


class Session:
    """One upload session driven by hand."""

    def __init__(self, hub: Hub, token: str, repo: str = "acme/vm") -> None:
        self.hub, self.repo, self.headers = hub, repo, auth(token)
        r = check(hub.client.post(f"/v2/{repo}/blobs/uploads/", headers=self.headers), 202)
        self.location = r.headers["Location"]
        self.uuid = self.location.rstrip("/").rsplit("/", 1)[-1]
        self.size = 0

    @property
    def recipe_url(self) -> str:
        return f"/api/v1/repositories/{self.repo}/blobs/uploads/{self.uuid}/recipe"

    def declare(self, recipe: dict):
        return self.hub.client.put(self.recipe_url, json=recipe, headers=self.headers)

    def patch(self, data: bytes):
        r = self.hub.client.patch(
            self.location,
            content=data,
            headers={
                **self.headers,
                "Content-Range": f"{self.size}-{self.size + len(data) - 1}",
                "Content-Type": "application/octet-stream",
            },
        )
        if r.status_code == 202:
            self.size += len(data)
        return r

    def finish(self, recipe: dict):
        return self.hub.client.post(self.recipe_url, json=recipe, headers=self.headers)

    def gone(self) -> bool:
        return self.hub.client.get(self.location, headers=self.headers).status_code == 404


def _rows(hub: Hub, model) -> list:
    async def go():
        async with hub.registry.ctx.sessions() as session:
            return (await session.exec(select(model))).all()

    return hub.call(go)


def _stored(hub: Hub) -> set[str]:
    async def go():
        return {k async for k in hub.registry.ctx.store.list("")}

    return hub.call(go)


def _inline_bytes(blob: DataBlob, held: frozenset[str] = frozenset()) -> bytes:
    data = blob.path.read_bytes()
    return b"".join(data[f.offset : f.offset + f.length] for f in blob.frames if f.digest not in held)


def _session_reads(hub: Hub, monkeypatch) -> list[str]:
    """Keys under ``uploads/`` the store is asked to read (a spy on the real store)."""
    store = hub.registry.ctx.store
    reads: list[str] = []
    real_open, real_read = store.open, store.read

    def spy_open(key, *args, **kwargs):
        reads.append(key)
        return real_open(key, *args, **kwargs)

    async def spy_read(key, *args, **kwargs):
        reads.append(key)
        return await real_read(key, *args, **kwargs)

    monkeypatch.setattr(store, "open", spy_open)
    monkeypatch.setattr(store, "read", spy_read)
    return reads


def test_declared_upload_is_verified_as_it_streams_and_never_read_back(
    hub: Hub, admin_token, images, tmp_path, monkeypatch
):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    payload = _inline_bytes(blob)
    session = Session(hub, admin_token)
    check(session.declare(_recipe(blob)), 202)
    check(session.declare(_recipe(blob)), 202)  # a resumed push declares again: the same recipe is fine
    reads = _session_reads(hub, monkeypatch)
    # three PATCHes; the first ends inside a frame, so its start is carried to the next request
    first = blob.frames[1].offset + 100
    second = blob.frames[3].offset
    for part in (payload[:first], payload[first:second], payload[second:]):
        check(session.patch(part), 202)
    (state,) = _rows(hub, UploadRecipe)
    assert state.valid and state.next_frame == len(blob.frames) and state.consumed == len(payload)
    check(session.finish(_recipe(blob)), 201)
    assert not [key for key in reads if key.startswith("uploads/")]
    assert _rows(hub, UploadRecipe) == []
    assert [p.key for p in _rows(hub, Pack)] == [session_pack_key(session.uuid)]
    assert _stored(hub) == {session_pack_key(session.uuid)}  # the session's bytes became the pack
    assert [b.digest for b in _rows(hub, Blob)] == [blob.digest]
    assert hub.pusher(admin_token).blob("acme/vm", blob.digest) == blob.path.read_bytes()


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "at-finish"])
def test_a_frame_that_does_not_match_its_digest_is_refused(hub: Hub, admin_token, images, tmp_path, declared):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    payload = bytearray(_inline_bytes(blob))
    victim = 2
    payload[blob.frames[victim].offset + 7] ^= 0xFF
    session = Session(hub, admin_token)
    if declared:
        check(session.declare(_recipe(blob)), 202)
        # refused at the PATCH carrying it, not at the finish
        detail = expect_error(session.patch(bytes(payload)), 400, "DIGEST_INVALID")
    else:
        check(session.patch(bytes(payload)), 202)
        detail = expect_error(session.finish(_recipe(blob)), 400, "DIGEST_INVALID")
    assert detail["frame"] == victim and detail["expected"] == blob.frames[victim].digest
    assert session.gone() and _stored(hub) == set()
    assert _rows(hub, Pack) == _rows(hub, Frame) == _rows(hub, Blob) == _rows(hub, UploadRecipe) == []


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "at-finish"])
def test_a_frame_that_does_not_hold_its_chunk_is_refused(hub: Hub, admin_token, images, tmp_path, declared):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    recipe = _recipe(blob)
    recipe["frames"][1][1] = blob.frames[0].chunk  # the right frame bytes, a lie about what they hold
    session = Session(hub, admin_token)
    if declared:
        check(session.declare(recipe), 202)
        detail = expect_error(session.patch(_inline_bytes(blob)), 400, "DIGEST_INVALID")
    else:
        check(session.patch(_inline_bytes(blob)), 202)
        detail = expect_error(session.finish(recipe), 400, "DIGEST_INVALID")
    assert detail == {"frame": 1, "chunk": blob.frames[0].chunk}
    assert session.gone() and _rows(hub, Frame) == []


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "at-finish"])
def test_a_truncated_upload_is_refused_at_the_finish(hub: Hub, admin_token, images, tmp_path, declared):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    session = Session(hub, admin_token)
    if declared:
        check(session.declare(_recipe(blob)), 202)
    check(session.patch(_inline_bytes(blob)[:-10]), 202)
    detail = expect_error(session.finish(_recipe(blob)), 400, "BLOB_UPLOAD_INVALID")
    assert detail["frame"] == len(blob.frames) - 1
    assert session.gone() and _rows(hub, Pack) == []


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "at-finish"])
def test_bytes_beyond_the_recipes_frames_are_refused(hub: Hub, admin_token, images, tmp_path, declared):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    session = Session(hub, admin_token)
    extra = _inline_bytes(blob) + b"smuggled"
    if declared:
        check(session.declare(_recipe(blob)), 202)
        r = session.patch(extra)  # refused at the PATCH
    else:
        check(session.patch(extra), 202)
        r = session.finish(_recipe(blob))
    detail = expect_error(r, 400, "BLOB_UPLOAD_INVALID")
    assert detail["uploaded"] == len(extra) - len(b"smuggled")
    assert session.gone() and _rows(hub, Pack) == []


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "at-finish"])
def test_a_recipe_whose_blob_digest_lies_is_refused(hub: Hub, admin_token, images, tmp_path, declared):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    lie = _recipe(blob, digest="sha256:" + "1" * 64)
    session = Session(hub, admin_token)
    if declared:
        check(session.declare(lie), 202)
    check(session.patch(_inline_bytes(blob)), 202)  # every frame is right
    detail = expect_error(session.finish(lie), 400, "DIGEST_INVALID")
    assert detail == {"expected": "sha256:" + "1" * 64, "actual": blob.digest}
    assert session.gone() and _rows(hub, Blob) == []


def test_the_finish_must_repeat_the_declared_recipe(hub: Hub, admin_token, images, tmp_path):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    session = Session(hub, admin_token)
    check(session.declare(_recipe(blob)), 202)
    check(session.patch(_inline_bytes(blob)), 202)
    other = _recipe(blob)
    other["frames"][0][2] += 1
    expect_error(session.finish(other), 400, "BLOB_UPLOAD_INVALID")
    assert session.gone()


def test_a_recipe_is_declared_once_and_before_any_byte(hub: Hub, admin_token, images, tmp_path):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    late = Session(hub, admin_token)
    check(late.patch(_inline_bytes(blob)[:100]), 202)
    detail = expect_error(late.declare(_recipe(blob)), 400, "BLOB_UPLOAD_INVALID")
    assert detail["size"] == 100 and late.gone()
    twice = Session(hub, admin_token)
    check(twice.declare(_recipe(blob)), 202)
    expect_error(twice.declare(_recipe(blob, digest="sha256:" + "2" * 64)), 400, "BLOB_UPLOAD_INVALID")
    expect_error(Session(hub, admin_token).declare({"mediaType": mt.RECIPE}), 400, "BLOB_UPLOAD_INVALID")


def test_held_frames_between_uploaded_ones_are_hashed_in_order(hub: Hub, images, tmp_path, monkeypatch):
    """Every other frame held by the hub (readable, public), the others uploaded: the PATCHes hash
    the held frames before the next uploaded one, the finish those after the last."""
    alice = hub.token("alice", "push:alice/*")
    carol = hub.token("carol", "push:carol/*")
    blob = _one_blob(hub, alice, images, tmp_path, "alice/base")
    hub.pusher(alice).push_recipe("alice/base", blob)
    hub.client.patch("/api/v1/repositories/alice/base", json={"public": True}, headers=auth(alice))
    # frames 1, 3, 5, … and the last are held; carol uploads the others
    held = frozenset(f.digest for i, f in enumerate(blob.frames) if i % 2 == 1 or i == len(blob.frames) - 1)
    session = Session(hub, carol, "carol/vm")
    check(session.declare(_recipe(blob, held)), 202)
    reads = _session_reads(hub, monkeypatch)
    payload = _inline_bytes(blob, held)
    half = blob.frames[2].length  # frame 0 and then part of frame 2 (frame 1 is held)
    check(session.patch(payload[: blob.frames[0].length + half // 2]), 202)
    check(session.patch(payload[blob.frames[0].length + half // 2 :]), 202)
    check(session.finish(_recipe(blob, held)), 201)
    assert not [key for key in reads if key.startswith("uploads/")]
    assert hub.pusher(carol).blob("carol/vm", blob.digest) == blob.path.read_bytes()


def test_a_held_frame_the_pusher_may_not_read_is_refused_at_the_declaration(hub: Hub, images, tmp_path):
    alice = hub.token("alice", "push:alice/*")
    bob = hub.token("bob", "push:bob/*")
    blob = _one_blob(hub, alice, images, tmp_path, "alice/base")
    hub.pusher(alice).push_recipe("alice/base", blob)  # private
    session = Session(hub, bob, "bob/vm")
    detail = expect_error(
        session.declare(_recipe(blob, frozenset({blob.frames[0].digest}))), 400, "BLOB_UPLOAD_INVALID"
    )
    assert detail["frames"] == [blob.frames[0].digest]
    assert session.gone()


def test_a_state_behind_the_session_falls_back_to_verifying_at_the_finish(hub: Hub, admin_token, images, tmp_path):
    """A crash between the store's commit and the database's leaves the state behind the bytes:
    the next PATCH marks it invalid and the finish verifies the whole session, lies included."""
    blob = _one_blob(hub, admin_token, images, tmp_path)
    payload = bytearray(_inline_bytes(blob))
    cut = blob.frames[2].offset
    for corrupt in (False, True):
        data = bytearray(payload)
        if corrupt:
            data[blob.frames[3].offset + 1] ^= 0xFF
        session = Session(hub, admin_token)
        check(session.declare(_recipe(blob)), 202)
        check(session.patch(bytes(data[:cut])), 202)

        async def fall_behind(upload_id: str = session.uuid) -> None:
            async with hub.registry.ctx.sessions() as db:
                row = await db.get(UploadRecipe, upload_id)
                row.consumed, row.next_frame = 0, 0
                db.add(row)
                await db.commit()

        hub.call(fall_behind)
        check(session.patch(bytes(data[cut:])), 202)  # not verified here: the state cannot continue
        (state,) = [r for r in _rows(hub, UploadRecipe) if r.upload_id == session.uuid]
        assert not state.valid
        if corrupt:
            detail = expect_error(session.finish(_recipe(blob)), 400, "DIGEST_INVALID")
            assert detail["frame"] == 3
        else:
            check(session.finish(_recipe(blob)), 201)


def _part(blob: DataBlob, first: int, last: int) -> dict:
    frames = _recipe(blob)["frames"][first:last]
    return {"mediaType": mt.RECIPE, "from": first, "frames": frames}


def test_a_recipe_declared_in_parts_while_the_blob_is_built(hub: Hub, admin_token, images, tmp_path, monkeypatch):
    """A client uploading as it builds declares frames as they come (``from``), PATCHes their bytes,
    and gives the digest and size only at the finish: verified all along, never read back."""
    blob = _one_blob(hub, admin_token, images, tmp_path)
    data = blob.path.read_bytes()
    session = Session(hub, admin_token)
    reads = _session_reads(hub, monkeypatch)
    cut = 2
    check(session.declare(_part(blob, 0, cut)), 202)
    check(session.declare(_part(blob, 0, cut)), 202)  # again: a no-op
    check(session.patch(data[: blob.frames[cut].offset]), 202)
    check(session.declare(_part(blob, cut, len(blob.frames))), 202)
    check(session.patch(data[blob.frames[cut].offset :]), 202)
    check(session.finish(_recipe(blob)), 201)
    assert not [key for key in reads if key.startswith("uploads/")]
    assert hub.pusher(admin_token).blob("acme/vm", blob.digest) == data


def test_declared_parts_must_follow_each_other_and_agree(hub: Hub, admin_token, images, tmp_path):
    blob = _one_blob(hub, admin_token, images, tmp_path)
    data = blob.path.read_bytes()
    gap = Session(hub, admin_token)
    check(gap.declare(_part(blob, 0, 1)), 202)
    detail = expect_error(gap.declare(_part(blob, 2, 3)), 400, "BLOB_UPLOAD_INVALID")
    assert detail["field"] == "from" and gap.gone()
    ahead = Session(hub, admin_token)
    check(ahead.declare(_part(blob, 0, 1)), 202)
    expect_error(ahead.patch(data[: blob.frames[2].offset]), 400, "BLOB_UPLOAD_INVALID")  # frame 1 undeclared
    assert ahead.gone()
    other = Session(hub, admin_token)
    check(other.declare(_part(blob, 0, 2)), 202)
    changed = _part(blob, 1, 2)
    changed["frames"][0][3] += 1
    expect_error(other.declare(changed), 400, "BLOB_UPLOAD_INVALID")
    short = Session(hub, admin_token)
    check(short.declare(_part(blob, 0, 2)), 202)
    check(short.patch(data[: blob.frames[2].offset]), 202)
    expect_error(short.finish(_recipe(blob)), 400, "BLOB_UPLOAD_INVALID")  # the finish names frames never declared
    assert short.gone()
