"""Each route sent its worst allowed input (docs/limits.md "What each route costs at most"): what serving it
allocates (tracemalloc, in-process), the CPU the process spends (``time.process_time``, every thread) and the
queries it runs (SQLAlchemy, counted; each reads a bounded batch) stay within generous ceilings set by the
limits, not by what a request declares or a tenant stored. Limits are scaled down so the worst case is cheap
to set up; the ceilings are relative to those limits. No wall-clock gates.

Covered: referrers, tokens, listings, frame queries, blob ranges, upload sessions (a claimed 64 GiB range, a
recipe declaring a 64 GiB blob), manifest pushes (a file at the chunk limit, false and true; annotations of
a generic manifest and of a forkd layer at the limit), registry.json of a repository at the tags limit and the
forkd pack of a chain at the depth limit."""

from __future__ import annotations

import hashlib
import json
import random
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from hub_server.settings import Limits
from manifest import mediatypes as mt
from tests.hub_server.conftest import Hub, stopped_hub_with
from tests.hub_server.pushing import auth
from tests.hub_server.registry.push.test_oci_content import artifact, digest, upload

MiB = 1 << 20
LIMITS = replace(
    Limits(),
    annotation_bytes=64 << 10,
    referrers_per_subject=24,
    referrers_page=100,
    file_chunks=1 << 16,
    token_scopes=100,
)


@dataclass
class Cost:
    peak: int = 0
    queries: int = 0
    cpu: float = 0.0
    """CPU seconds of the whole process (every thread) while the block ran."""


@contextmanager
def measured(hub) -> Iterator[Cost]:
    """Peak bytes allocated and SELECT statements run while the block runs."""
    cost = Cost()
    engine = hub.client.app.state.engine.sync_engine

    def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        cost.queries += statement.lstrip().upper().startswith("SELECT")

    event.listen(engine, "after_cursor_execute", count)
    tracemalloc.start()
    started = time.process_time()
    try:
        yield cost
        cost.peak = tracemalloc.get_traced_memory()[1]
        cost.cpu = time.process_time() - started
    finally:
        tracemalloc.stop()
        event.remove(engine, "after_cursor_execute", count)


@pytest.fixture
def limited(make_hub):
    hub = make_hub(limits=LIMITS)
    token = hub.token("ci", "push:acme/*")
    hub.client.get("/v2/", headers=auth(token))  # warm imports and caches
    return hub, token


def test_referrers_of_a_subject_at_every_limit(limited):
    """As many referrers as a subject may have, each with as many annotation bytes as allowed: one page."""
    hub, token = limited
    subject = {"mediaType": mt.OCI_MANIFEST, "digest": digest(b"s"), "size": 1}
    upload(hub, token, "acme/r", b"{}")
    note = "x" * (LIMITS.annotation_bytes - 100)
    for i in range(LIMITS.referrers_per_subject):
        body = artifact(subject, annotations={"n": str(i), "note": note})
        assert (
            hub.client.put(f"/v2/acme/r/manifests/{digest(body)}", content=body, headers=auth(token)).status_code == 201
        )
    with measured(hub) as cost:
        r = hub.client.get(f"/v2/acme/r/referrers/{subject['digest']}", headers=auth(token))
    assert r.status_code == 200 and len(r.content) <= MiB + LIMITS.annotation_bytes
    assert cost.peak < 4 * MiB, cost  # a page of 1 MiB, not the 1.5 MiB stored nor 100 × 64 KiB allowed a page
    assert cost.queries <= 2 + LIMITS.referrers_per_subject // 16 + 4, cost  # batches of 16 rows


def test_a_declared_file_at_the_chunk_limit(limited, images, tmp_path):
    """The largest chunk list a push may make the hub build: FILE_CHUNKS × 32 bytes (2 MiB here)."""
    hub, token = limited
    pusher = hub.pusher(token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    size, chunk = LIMITS.file_chunks * 4096, 4096
    declared = "blake3:" + "cd" * 32
    chunk_map = replace(layer.chunk_map, size=size, chunk_size=chunk, digest=declared, entries=(), blobs=())
    obj = json.loads(layer.config)
    obj["files"][mt.MEMORY_FILE].update(size=size, chunkSize=chunk, digest=declared)
    worst = layer.rebuild(chunk_map=chunk_map, config=json.dumps(obj).encode(), data_blobs={})
    for d, data in worst.small_blobs.items():
        pusher.ensure_blob("acme/vm", data, d)
    with measured(hub) as cost:
        r = hub.client.put(
            f"/v2/acme/vm/manifests/{worst.digest}",
            content=worst.manifest,
            headers={**auth(token), "Content-Type": mt.OCI_MANIFEST},
        )
    assert r.status_code == 400 and r.json()["errors"][0]["code"] == "MANIFEST_INVALID"  # its digest is false
    list_bytes = LIMITS.file_chunks * 32
    assert cost.peak < 4 * list_bytes + 4 * MiB, cost


def test_a_token_request_with_every_scope_allowed(limited):
    hub, _ = limited
    token = hub.token("glob", "pull:acme/*")
    scopes = [("scope", f"repository:acme/r{i}:pull") for i in range(LIMITS.token_scopes)]
    with measured(hub) as cost:
        r = hub.client.get("/v2/token", params=scopes, headers=auth(token))
    assert r.status_code == 200, r.text
    issued = r.json()["token"]
    assert len(issued) < 64 << 10 and cost.peak < 4 * MiB, (len(issued), cost)
    with measured(hub) as cost:
        assert hub.client.get("/v2/acme/r0/tags/list", headers=auth(issued)).status_code in (200, 404)
    assert cost.peak < 4 * MiB, cost


def test_a_manifest_with_annotations_at_the_limit(limited):
    hub, token = limited
    upload(hub, token, "acme/a", b"{}")
    body = artifact(annotations={f"k{i}": "v" * 50 for i in range((LIMITS.annotation_bytes - 100) // 60)})
    assert len(body) < LIMITS.annotation_bytes + 1024
    with measured(hub) as cost:
        r = hub.client.put(f"/v2/acme/a/manifests/{digest(body)}", content=body, headers=auth(token))
    assert r.status_code == 201, r.text
    assert cost.peak < 4 * MiB, cost


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> tuple[Path, str]:
    """A stopped hub's data directory holding acme/l with 30 tags, pushed once per module (per worker), and the
    token that pushed them: each route below is asked on a fresh hub started on a copy (its caches cold)."""

    def fill(hub: Hub, work: Path) -> str:
        token = hub.token("ci", "push:acme/*")
        upload(hub, token, "acme/l", b"{}")
        body = artifact()
        for i in range(30):
            assert hub.client.put(f"/v2/acme/l/manifests/t{i}", content=body, headers=auth(token)).status_code == 201
        return token

    return stopped_hub_with(tmp_path_factory.mktemp("listed"), sqlite_template, fill)


@pytest.mark.parametrize("route", ["tags", "catalog", "search"])
def test_listing_routes_clamp_their_page(make_hub: Callable[..., Hub], listed: tuple[Path, str], route: str):
    hub, token = make_hub(template=listed[0], limits=LIMITS), listed[1]
    hub.client.get("/v2/", headers=auth(token))  # warm imports and caches, as ``limited`` does
    url: dict[str, Callable[[], Any]] = {
        "tags": lambda: hub.client.get("/v2/acme/l/tags/list", params={"n": 10**9}, headers=auth(token)),
        "catalog": lambda: hub.client.get("/v2/_catalog", params={"n": 10**9}, headers=auth(token)),
        "search": lambda: hub.client.get("/api/v1/repositories", params={"n": 10**9}, headers=auth(token)),
    }
    with measured(hub) as cost:
        r = url[route]()
    assert r.status_code == 200, r.text
    assert cost.peak < 4 * MiB and cost.queries <= 8, cost


def test_a_frames_query_with_every_digest_allowed(limited):
    hub, token = limited
    upload(hub, token, "acme/q", b"{}")
    wanted = [f"blake3:{i:064x}" for i in range(LIMITS.chunks_per_query)]
    with measured(hub) as cost:
        r = hub.client.post("/api/v1/repositories/acme/q/frames/query", json={"digests": wanted}, headers=auth(token))
    assert r.status_code == 200 and r.json()["found"] == {}, r.text[:300]
    body = LIMITS.chunks_per_query * 80  # what was sent
    assert cost.peak < 16 * body + 4 * MiB, cost
    over = hub.client.post(
        "/api/v1/repositories/acme/q/frames/query",
        json={"digests": [*wanted, "blake3:" + "f" * 64]},
        headers=auth(token),
    )
    assert over.status_code == 413


def test_a_blob_read_with_every_range_allowed(limited):
    hub, token = limited
    data = bytes(range(256)) * 4096  # 1 MiB
    blob = upload(hub, token, "acme/b", data)
    spans = ",".join(f"{i * 4096}-{i * 4096 + 9}" for i in range(LIMITS.ranges_per_request))
    with measured(hub) as cost:
        r = hub.client.get(f"/v2/acme/b/blobs/{blob}", headers={**auth(token), "Range": f"bytes={spans}"})
    assert r.status_code == 206 and r.content.count(b"Content-Range") == LIMITS.ranges_per_request
    assert cost.peak < 4 * MiB, cost
    spans += f",{len(data) - 10}-{len(data) - 1}"
    r = hub.client.get(f"/v2/acme/b/blobs/{blob}", headers={**auth(token), "Range": f"bytes={spans}"})
    assert r.status_code >= 400


# -- upload sessions: what a request claims costs nothing; what it sends is streamed ----------------


def _location(hub, token: str, repo: str) -> str:
    r = hub.client.post(f"/v2/{repo}/blobs/uploads/", headers=auth(token))
    assert r.status_code == 202, r.text
    return r.headers["Location"]


def test_upload_requests_claiming_the_largest_blob(limited):
    """A PATCH whose Content-Range claims BLOB_BYTES and a PUT finishing it under a false digest: both cost
    what was sent (1 KiB), never the size claimed (64 GiB)."""
    hub, token = limited
    body = b"x" * 1024
    with measured(hub) as cost:
        location = _location(hub, token, "acme/u")
        claimed = hub.client.patch(
            location,
            content=body,
            headers={
                **auth(token),
                "Content-Range": f"0-{LIMITS.blob_bytes - 1}",
                "Content-Type": "application/octet-stream",
            },
        )
        patched = hub.client.patch(
            location,
            content=body,
            headers={**auth(token), "Content-Range": f"0-{len(body) - 1}", "Content-Type": "application/octet-stream"},
        )
        finished = hub.client.put(location, params={"digest": digest(b"not these bytes")}, headers=auth(token))
    assert claimed.status_code == 400 and claimed.json()["errors"][0]["code"] == "BLOB_UPLOAD_INVALID", claimed.text
    assert patched.status_code in (202, 404), patched.text  # the session goes on, or was dropped with the bad PATCH
    assert finished.status_code == 400 and finished.json()["errors"][0]["code"] == "DIGEST_INVALID"
    assert cost.peak < 4 * MiB and cost.cpu < 10, cost


def _largest_recipe() -> tuple[dict[str, Any], int]:
    """A recipe declaring a blob of BLOB_BYTES (64 GiB) in the fewest frames allowed (all to be uploaded)."""
    from hub_server.registry.content.recipes import MAX_FRAME_BYTES

    frames, left, i = [], LIMITS.blob_bytes, 0
    while left:
        length = min(left, MAX_FRAME_BYTES)
        frames.append([f"blake3:{i:064x}", f"blake3:{i + 1:064x}", 1 << 20, length, True])
        left, i = left - length, i + 1
    recipe = {"mediaType": mt.RECIPE, "digest": digest(b"the 64 GiB blob"), "size": LIMITS.blob_bytes, "frames": frames}
    return recipe, len(json.dumps(recipe))


def test_a_recipe_declaring_the_largest_blob(limited):
    """A data blob's recipe declared before its frames (PUT …/recipe) at BLOB_BYTES, a first piece of its first
    frame, then the finish: costs O(the recipe sent), not O(the 64 GiB declared)."""
    hub, token = limited
    recipe, recipe_bytes = _largest_recipe()
    location = _location(hub, token, "acme/r")
    uuid = location.rstrip("/").rsplit("/", 1)[-1]
    url = f"/api/v1/repositories/acme/r/blobs/uploads/{uuid}/recipe"
    with measured(hub) as cost:
        declared = hub.client.put(url, json=recipe, headers=auth(token))
        piece = hub.client.patch(
            location,
            content=b"\x28\xb5\x2f\xfd" + bytes(4092),  # a zstd frame's start, then nonsense
            headers={**auth(token), "Content-Range": "0-4095", "Content-Type": "application/octet-stream"},
        )
        finished = hub.client.post(url, json=recipe, headers=auth(token))
    assert declared.status_code == 202, declared.text
    assert piece.status_code in (202, 400), piece.text  # held until the frame is whole, or refused as soon as seen
    assert finished.status_code in (400, 404), finished.text  # the session's bytes are not the recipe's
    assert cost.peak < 16 * recipe_bytes + 8 * MiB and cost.cpu < 30, (cost, recipe_bytes)


# -- manifest pushes at the limits ---------------------------------------------------------------------


def test_a_true_file_at_the_chunk_limit_is_hashed_once_in_bounded_memory(limited, images, tmp_path):
    """A true all-zero memory.bin of FILE_CHUNKS chunks: its chunk tree proven in O(chunks), then its sha256
    (issue 27 item 5) hashed in full (O(declared size), the documented cost), holding ≤ 24 + 32 bytes a chunk."""
    from manifest.chunktree import ChunkList

    hub, token = limited
    pusher = hub.pusher(token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    size, chunk = LIMITS.file_chunks * 4096, 4096
    tree = ChunkList(size, chunk).digest()
    zeros, sha = bytes(MiB), hashlib.sha256()
    for _ in range(size // MiB):
        sha.update(zeros)
    chunk_map = replace(layer.chunk_map, size=size, chunk_size=chunk, digest=tree, entries=(), blobs=())
    obj = json.loads(layer.config)
    obj["files"][mt.MEMORY_FILE].update(size=size, chunkSize=chunk, digest=tree, sha256="sha256:" + sha.hexdigest())
    worst = layer.rebuild(chunk_map=chunk_map, config=json.dumps(obj).encode(), data_blobs={})
    for d, data in worst.small_blobs.items():
        pusher.ensure_blob("acme/vm", data, d)
    metric = hub.registry.ctx.metrics.push_sha256_bytes
    before = metric._value.get()
    with measured(hub) as cost:
        r = hub.client.put(
            f"/v2/acme/vm/manifests/{worst.digest}",
            content=worst.manifest,
            headers={**auth(token), "Content-Type": mt.OCI_MANIFEST},
        )
    assert r.status_code == 201, r.text
    assert metric._value.get() - before == size  # hashed once, every byte declared, nothing more
    assert cost.peak < 4 * LIMITS.file_chunks * (32 + 24) + 8 * MiB, cost  # not O(size): 256 MiB here
    assert cost.cpu < 60, cost  # 256 MiB of sha256 and the O(chunks) proofs


def test_a_forkd_layer_with_config_and_manifest_annotations_at_the_limit(limited, images, tmp_path):
    hub, token = limited
    pusher = hub.pusher(token)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    obj = json.loads(layer.config)
    obj["annotations"] = {f"k{i}": "v" * 50 for i in range((LIMITS.annotation_bytes - 200) // 60)}
    worst = layer.rebuild(config=json.dumps(obj).encode())
    for d, path in worst.data_blobs.items():
        pusher.ensure_blob("acme/vm", path.read_bytes(), d)
    for d, data in worst.small_blobs.items():
        pusher.ensure_blob("acme/vm", data, d)
    with measured(hub) as cost:
        r = hub.client.put(
            "/v2/acme/vm/manifests/v1",
            content=worst.manifest,
            headers={**auth(token), "Content-Type": mt.OCI_MANIFEST},
        )
    assert r.status_code == 201, r.text
    assert cost.peak < 4 * MiB + 8 * LIMITS.annotation_bytes, cost
    obj["annotations"]["one more"] = "v" * 400
    over = layer.rebuild(config=json.dumps(obj).encode())
    for d, data in over.small_blobs.items():
        pusher.ensure_blob("acme/vm", data, d)
    r = hub.client.put(
        "/v2/acme/vm/manifests/v2", content=over.manifest, headers={**auth(token), "Content-Type": mt.OCI_MANIFEST}
    )
    assert r.status_code == 413 and r.json()["errors"][0]["detail"]["field"] == "annotations"


# -- forkd interop: registry.json and packs for a repository at the limits --------------------------------

FORKD_LIMITS = replace(LIMITS, tags_per_repository=48, chain_depth=4)


def test_registry_json_of_a_repository_with_every_tag_allowed(make_hub, images, tmp_path):
    """registry.json lists every tag of every public repository (forkd's format has no pages): its cost grows
    with the tags stored, a few KiB and no query per tag, and builds no pack twice."""
    hub = make_hub(limits=FORKD_LIMITS)
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "b")
    pusher.push_layer("acme/vm", layer, "t0", public=True)
    for i in range(1, FORKD_LIMITS.tags_per_repository):
        pusher.put_manifest("acme/vm", f"t{i}", layer.manifest)
    assert hub.client.put("/v2/acme/vm/manifests/over", content=layer.manifest, headers=auth(admin)).status_code == 403
    hub.client.get("/registry.json")  # the pack is built once (if the push's background build did not yet)
    with measured(hub) as cost:
        r = hub.client.get("/registry.json")
    versions = r.json()["packages"]["acme/vm"]["versions"]
    assert r.status_code == 200 and len(versions) == FORKD_LIMITS.tags_per_repository + 1  # and forkd's "latest"
    assert cost.peak < 4 * MiB + FORKD_LIMITS.tags_per_repository * 16 * 1024, cost
    assert cost.queries <= 8, cost


def test_a_pack_of_a_chain_at_the_depth_limit_is_built_in_bounded_memory(make_hub, tmp_path):
    """The forkd pack of a chain as deep as allowed whose files are mostly zeros: assembled on disk, streamed,
    so memory stays at the build's windows whatever the files' sizes (4 × 64 MiB here)."""
    from tests.manifest.images import mutate_image, random_image

    hub = make_hub(limits=FORKD_LIMITS)
    admin = hub.token("admin", "admin")
    rng = random.Random(27)
    memory = random_image(tmp_path / "m0.bin", rng, 64 * MiB, n_extents=8)
    chain = [(memory, b"v0" * 50)]
    for i in range(1, FORKD_LIMITS.chain_depth):
        memory = mutate_image(memory, tmp_path / f"m{i}.bin", rng, n_writes=4)
        chain.append((memory, f"v{i}".encode() * 50))
    hub.pusher(admin).push_chain("acme/deep", chain, tmp_path / "w", "head")
    with measured(hub) as cost:
        r = hub.client.get("/packs/acme/deep/head.forkd-snapshot.tar.zst", headers=auth(admin))
    assert r.status_code == 200, r.text[:300]
    logical = sum(path.stat().st_size for path, _ in chain)
    assert cost.peak < 48 * MiB < logical, (cost, logical)  # the frame windows (8 × 4 MiB) and hash blocks
