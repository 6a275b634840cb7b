"""Retention (``registry/upkeep/retention.py``) applied by GC, on SQLite and PostgreSQL: the policy expires only
matching tags beyond its rules, a dry run deletes nothing, and what a kept tag chains on always stays."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlmodel import col

from hub_server.db.models import Manifest, Tag
from hub_server.registry.content.policy import Retention
from hub_server.registry.upkeep.retention import select_expired
from hub_server.tagglobs import TagGlobs
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, check
from tests.hub_server.registry.upkeep.test_gc import digests, gc
from tests.manifest.images import same_bytes

NOW = datetime(2026, 12, 1, 12, 0, 0).astimezone()


def test_select_expired_keeps_the_last_n_or_the_young_among_matching_tags():
    tags = [(f"nightly-{i}", f"sha256:{i}", NOW - timedelta(days=10 - i)) for i in range(10)]
    tags.append(("release", "sha256:r", NOW - timedelta(days=100)))
    last3 = select_expired(Retention(3, None, TagGlobs.parse("nightly-*")), tags, NOW)
    assert [t[0] for t in last3] == [f"nightly-{i}" for i in range(6, -1, -1)]
    assert "not among the last 3" in last3[0][3]
    young = select_expired(Retention(None, 4, TagGlobs.parse("*")), tags, NOW)
    assert sorted(t[0] for t in young) == sorted(["release", *(f"nightly-{i}" for i in range(6))])
    either = select_expired(Retention(2, 5, TagGlobs.parse("nightly-*")), tags, NOW)  # 5 days keeps 5..9
    assert sorted(t[0] for t in either) == sorted(f"nightly-{i}" for i in range(5))
    assert select_expired(Retention(20, None, TagGlobs.parse("*")), tags, NOW) == []


def _age_tags(hub: Hub, ages: dict[str, timedelta]) -> None:
    """Make the tags of acme/ci look set ``ages`` ago (pushes here happen within milliseconds)."""

    async def go():
        async with hub.registry.ctx.sessions() as session:
            for name, age in ages.items():
                await session.exec(
                    update(Tag).where(col(Tag.name) == name).values(updated_at=hub.registry.ctx.clock() - age)
                )
            await session.commit()

    hub.call(go)


def _tags(hub: Hub) -> set[str]:
    return digests(hub, Tag, Tag.name)


def _nightlies(hub: Hub, token: str, images, tmp_path):
    """nightly-1 → nightly-2 → nightly-3 (one chain, each link tagged), an unrelated nightly-0 and a release."""
    pusher = hub.pusher(token)
    layers = []
    for i, (memory, vmstate) in enumerate(images):
        layer = pusher.build_layer("acme/ci", memory, vmstate, tmp_path / f"l{i}", layers[-1] if layers else None)
        pusher.push_layer("acme/ci", layer, f"nightly-{i + 1}")
        layers.append(layer)
    other = tmp_path / "other.bin"
    other.write_bytes(os.urandom(3 * 65536))
    lone = pusher.build_layer("acme/ci", other, b"lone", tmp_path / "lone")
    pusher.push_layer("acme/ci", lone, "nightly-0")
    pusher.push_layer("acme/ci", layers[0], "release")
    _age_tags(
        hub,
        {
            "nightly-0": timedelta(days=9),
            "nightly-1": timedelta(days=8),
            "nightly-2": timedelta(days=7),
            "nightly-3": timedelta(days=1),
            "release": timedelta(days=30),
        },
    )
    return pusher, layers, lone


def test_retention_never_breaks_a_kept_chain_and_a_dry_run_removes_nothing(hub: Hub, admin_token, images, tmp_path):
    pusher, layers, lone = _nightlies(hub, admin_token, images, tmp_path)
    check(
        hub.client.patch(
            "/api/v1/repositories/acme/ci",
            json={"retention": {"keepLast": 1, "pattern": "nightly-*"}},
            headers=auth(admin_token),
        ),
        200,
    )
    before = (_tags(hub), digests(hub, Manifest, Manifest.digest))

    dry = gc(hub, dry_run=True, grace=timedelta(0))
    assert [(e["tag"], e["digest"]) for e in dry.retention] == [
        ("nightly-0", lone.digest),
        ("nightly-1", layers[0].digest),
        ("nightly-2", layers[1].digest),
    ]
    assert dry.retention_manifests == [lone.digest]  # nightly-1 and -2 are ancestors of the kept nightly-3
    assert (_tags(hub), digests(hub, Manifest, Manifest.digest)) == before

    report = gc(hub, later=True)
    assert _tags(hub) == {"nightly-3", "release"}  # release does not match the pattern
    kept = digests(hub, Manifest, Manifest.digest)
    assert lone.digest not in kept and {layer.digest for layer in layers} <= kept
    assert report.manifests == [lone.digest]
    pulled = pusher.pull("acme/ci", "nightly-3", tmp_path / "pulled")
    for (memory, vmstate), (want_memory, want_vmstate) in zip(pulled, images, strict=True):
        assert same_bytes(memory, want_memory) and vmstate == want_vmstate
    pusher.pull("acme/ci", "release", tmp_path / "release")
    assert gc(hub, grace=timedelta(0)).retention == []  # nothing more to expire


def test_keep_days_expires_old_tags_and_a_kept_tag_on_the_same_digest_holds_it(hub: Hub, admin_token, images, tmp_path):
    pusher, layers, lone = _nightlies(hub, admin_token, images, tmp_path)
    pusher.push_layer("acme/ci", lone, "pinned")  # unmatched, names the same digest as nightly-0
    check(
        hub.client.patch(
            "/api/v1/repositories/acme/ci", json={"retention": {"keepDays": 3}}, headers=auth(admin_token)
        ),
        200,
    )
    report = gc(hub, grace=timedelta(0))
    assert sorted(e["tag"] for e in report.retention) == ["nightly-0", "nightly-1", "nightly-2", "release"]
    assert _tags(hub) == {"nightly-3", "pinned"}
    assert report.manifests == []  # the chain is under nightly-3, the lone layer under pinned
    assert {lone.digest, *(layer.digest for layer in layers)} <= digests(hub, Manifest, Manifest.digest)


def test_a_tag_moved_after_planning_is_not_expired(hub: Hub, admin_token, images, tmp_path):
    from hub_server.registry.upkeep.retention import expire_tags, plan_retention

    pusher, layers, _ = _nightlies(hub, admin_token, images, tmp_path)
    check(
        hub.client.patch(
            "/api/v1/repositories/acme/ci",
            json={"retention": {"keepLast": 1, "pattern": "nightly-*"}},
            headers=auth(admin_token),
        ),
        200,
    )
    ctx = hub.registry.ctx
    planned = hub.call(plan_retention, ctx, ctx.clock())
    pusher.push_layer("acme/ci", layers[2], "nightly-0")  # moved meanwhile: now the newest
    done = hub.call(expire_tags, ctx, planned, "test")
    assert [e.tag for e in done] == ["nightly-1", "nightly-2"]
    assert "nightly-0" in _tags(hub)


def test_referrers_of_kept_manifests_stay(hub: Hub, admin_token, images, tmp_path):
    from tests.hub_server.registry.push.test_oci_content import artifact, upload

    pusher, layers, _ = _nightlies(hub, admin_token, images, tmp_path)
    upload(hub, admin_token, "acme/ci", b"{}")
    head = layers[2]
    subject = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": head.digest,
        "size": len(head.manifest),
    }
    signature = artifact(subject=subject)
    r = hub.client.put(
        f"/v2/acme/ci/manifests/sha256:{hashlib.sha256(signature).hexdigest()}",
        content=signature,
        headers={**auth(admin_token), "Content-Type": "application/vnd.oci.image.manifest.v1+json"},
    )
    check(r, 201)
    check(
        hub.client.patch(
            "/api/v1/repositories/acme/ci",
            json={"retention": {"keepLast": 1, "pattern": "nightly-*"}},
            headers=auth(admin_token),
        ),
        200,
    )
    gc(hub, later=True)
    referrers = check(hub.client.get(f"/v2/acme/ci/referrers/{head.digest}", headers=auth(admin_token)), 200).json()
    assert [m["digest"] for m in referrers["manifests"]] == [r.headers["docker-content-digest"]]
    assert pusher.blob("acme/ci", referrers["manifests"][0]["digest"]) == signature
