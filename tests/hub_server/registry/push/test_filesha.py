"""Issue 27 item 5: a layer whose whole-file sha256 is false (its chunk tree right) is refused at push.

Through the app: the false sha256 is refused with a typed error and nothing is written; true chains
pass (sizes growing, shrinking inside a chunk and growing again); the hashing runs on a worker
thread, bounded by ``FORKD_HUB_FILE_SHA256_CHECKS`` (0: off), and a manifest the hub already holds, or
a file a layer leaves unchanged, is not hashed again (bytes counted by the push metric).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading

import anyio
import pytest

from hub_server.db.models import Manifest, Tag
from hub_server.registry.push.filesha import FileLayout
from hub_server.settings import Limits, SettingsError, load_settings
from manifest import mediatypes as mt
from manifest.model import ChunkEntry, ChunkMap
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import BuiltLayer, auth, expect_error
from tests.hub_server.registry.push.test_manifests import count, put, upload_all
from tests.manifest.images import mutate_image

FALSE = "sha256:" + "0" * 64


def hashed(hub: Hub) -> int:
    return int(hub.registry.ctx.metrics.push_sha256_bytes._value.get())


def with_false_sha256(layer: BuiltLayer) -> BuiltLayer:
    config = json.loads(layer.config)
    config["files"][mt.MEMORY_FILE]["sha256"] = FALSE
    return layer.rebuild(config=json.dumps(config).encode())


def memory_size(layer: BuiltLayer) -> int:
    return json.loads(layer.config)["files"][mt.MEMORY_FILE]["size"]


def _map(size: int, entries: list[ChunkEntry], *, parent: bool = True) -> ChunkMap:
    blobs = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
    return ChunkMap(mt.MEMORY_FILE, size, 4096, "blake3:" + "0" * 64, "p" if parent else None, blobs, tuple(entries))


def test_a_file_layout_follows_truncation_and_growth():
    """Where each chunk's bytes come from, link after link: truncating inside a chunk keeps its head only,
    growing again adds zeros after it, a zero entry or a new chunk is zeros, a map with no parent starts over."""
    layout = FileLayout()
    d = "blake3:" + "1" * 64
    layout.apply(_map(10_000, [ChunkEntry(i, d, i % 2, 100 * i, 50) for i in range(3)], parent=False))
    assert list(layout.blob) == [0, 1, 0] and list(layout.raw) == [4096, 4096, 1808] == list(layout.keep)
    layout.apply(_map(6000, [ChunkEntry(0, None)]))  # chunk 0 zeroed, the file cut inside chunk 1
    assert list(layout.blob) == [-1, 1] and layout.keep[1] == 6000 - 4096 and layout.raw[1] == 4096
    layout.apply(_map(3 * 4096 + 1, []))  # grown again: chunk 1 is its old head then zeros; 2 and 3 are new zeros
    assert list(layout.blob) == [-1, 1, -1, -1] and layout.keep[1] == 1904
    assert [layout.chunk_length(i) for i in range(4)] == [4096, 4096, 4096, 1]
    assert [list(step) for step in layout.steps()] == [[0, 1, 2, 3]]
    layout.apply(_map(4096, [ChunkEntry(0, d, 1, 7, 9)], parent=False))  # a new file: nothing inherited
    assert list(layout.blob) == [1] and layout.blobs[1] == "sha256:" + "b" * 64 and layout.offset[0] == 7


def test_a_false_sha256_is_refused_and_nothing_is_written(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    good = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    false = with_false_sha256(good)
    upload_all(pusher, "acme/vm", false)
    detail = expect_error(put(hub, admin_token, "acme/vm", "v1", false.manifest), 400, "DIGEST_INVALID")
    truth = json.loads(good.config)["files"][mt.MEMORY_FILE]["sha256"]
    assert detail == {"file": mt.MEMORY_FILE, "declared": FALSE, "actual": truth}
    assert count(hub, Manifest) == 0 and count(hub, Tag) == 0
    expect_error(hub.client.get("/v2/acme/vm/manifests/v1", headers=auth(admin_token)), 404, "MANIFEST_UNKNOWN")
    pusher.push_layer("acme/vm", good, "v1")  # the true sha256 passes
    assert count(hub, Manifest) == 1  # the true layer alone
    assert hashed(hub) == 2 * memory_size(good)  # the false one hashed, then the true one


def test_a_child_with_a_false_sha256_over_a_true_parent_is_refused(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    base = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    pusher.push_layer("acme/vm", base, "base")
    child = with_false_sha256(pusher.build_layer("acme/vm", *images[1], tmp_path / "c", parent=base))
    upload_all(pusher, "acme/vm", child)
    detail = expect_error(put(hub, admin_token, "acme/vm", "child", child.manifest), 400, "DIGEST_INVALID")
    assert detail["file"] == mt.MEMORY_FILE and detail["declared"] == FALSE


def test_true_chains_pass_as_their_files_grow_shrink_and_grow(hub: Hub, admin_token, images, tmp_path):
    """The hub rebuilds each file from the chain's maps the way assembly does (truncate, zero-extend)."""
    rng = random.Random(7)
    base, child = images[0], images[1]
    shrunk = mutate_image(child[0], tmp_path / "shrunk.bin", rng, new_size=3 * (1 << 20) + 1000, n_writes=2)
    grown = mutate_image(shrunk, tmp_path / "grown.bin", rng, new_size=5 * (1 << 20) + 7, n_writes=2)
    chain = [base, child, (shrunk, b"s" * 100), (grown, b"g" * 100), images[2]]
    hub.pusher(admin_token).push_chain("acme/vm", chain, tmp_path / "w", "head")
    assert hashed(hub) == sum(path.stat().st_size for path, _ in chain)


def test_a_repush_a_retag_and_an_unchanged_file_are_not_hashed_again(hub: Hub, admin_token, images, tmp_path):
    pusher = hub.pusher(admin_token)
    base = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    pusher.push_layer("acme/vm", base, "v1")
    once = hashed(hub)
    assert once == memory_size(base)
    pusher.put_manifest("acme/vm", "v2", base.manifest)  # a retag
    pusher.put_manifest("acme/vm", base.digest, base.manifest)  # a re-push
    pusher.put_manifest("acme/other", "v1", base.manifest)  # the same layer in another repository
    same = pusher.build_layer("acme/vm", images[0][0], b"another vmstate", tmp_path / "s", parent=base)
    pusher.push_layer("acme/vm", same, "same")  # memory.bin unchanged: its parent's bytes
    assert hashed(hub) == once


def test_the_hashing_runs_on_a_worker_thread(hub: Hub, admin_token, images, tmp_path):
    """While a file is being hashed (held in its worker thread), an unrelated request is answered."""
    pusher = hub.pusher(admin_token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    upload_all(pusher, "acme/vm", layer)
    hashing, answered = threading.Event(), threading.Event()
    seen: list[tuple[bool, bool]] = []

    def on_the_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def hold(step_bytes: int) -> None:  # called in the thread that hashed the step
        seen.append((on_the_loop(), answered.is_set()))
        hashing.set()
        answered.wait(timeout=120)  # released as soon as the other request was answered

    hub.registry.manifests.file_sha256.on_step = hold
    pushed: list[int] = []
    push = threading.Thread(
        target=lambda: pushed.append(put(hub, admin_token, "acme/vm", "v1", layer.manifest).status_code)
    )
    push.start()
    assert hashing.wait(timeout=120)
    assert hub.client.get("/v2/", headers=auth(admin_token)).status_code == 200  # the event loop is free
    answered.set()
    push.join(timeout=120)
    assert pushed == [201]
    assert seen and seen[0] == (False, False)  # hashed off the event loop, and held there before the other answer


def test_turns_are_hub_wide_and_one_namespace_holds_at_most_half(hub: Hub):
    """With 2 turns: a second proof of namespace acme waits for the first, one of another namespace does not;
    a third namespace waits for a hub-wide turn. Ordered by anyio's scheduler (every other task blocked)."""
    checker = hub.registry.manifests.file_sha256
    assert checker.concurrency == Limits().file_sha256_checks == 2 and checker.per_namespace == 1
    entered: list[str] = []

    async def run() -> None:
        release = {name: anyio.Event() for name in ("acme-1", "acme-2", "other", "third")}

        async def prove(namespace: str, name: str) -> None:
            async with checker.turn(namespace):
                entered.append(name)
                await release[name].wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(prove, "acme", "acme-1")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(prove, "acme", "acme-2")
            tg.start_soon(prove, "other", "other")
            await anyio.wait_all_tasks_blocked()
            assert entered == ["acme-1", "other"]  # acme's second proof waits for acme's turn
            tg.start_soon(prove, "third", "third")
            await anyio.wait_all_tasks_blocked()
            assert entered == ["acme-1", "other"]  # both hub-wide turns are held
            release["acme-1"].set()
            await anyio.wait_all_tasks_blocked()
            assert len(entered) == 3 and entered[2] in ("acme-2", "third")
            for event in release.values():
                event.set()
        assert checker._namespaces == {}  # nothing kept for namespaces at rest

    anyio.run(run)


def test_zero_checks_turns_the_check_off(make_hub, images, tmp_path):
    """A hub of trusted pushers (FORKD_HUB_FILE_SHA256_CHECKS=0) accepts what it does not check; the forkd
    pack builds' damage marks are then the only defence (tests/hub_server/registry/forkd/test_compat.py)."""
    from dataclasses import replace

    hub = make_hub(limits=replace(Limits(), file_sha256_checks=0))
    token = hub.token("admin", "admin")
    pusher = hub.pusher(token)
    false = with_false_sha256(pusher.build_layer("acme/vm", *images[0], tmp_path / "b"))
    pusher.push_layer("acme/vm", false, "v1")
    assert hashed(hub) == 0


def test_the_setting_parses():
    assert load_settings(env={"FORKD_HUB_FILE_SHA256_CHECKS": "0"}).limits.file_sha256_checks == 0
    assert load_settings(env={}).limits.file_sha256_checks == 2
    with pytest.raises(SettingsError):
        load_settings(env={"FORKD_HUB_FILE_SHA256_CHECKS": "-1"})
