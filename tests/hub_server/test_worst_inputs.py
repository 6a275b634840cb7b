"""Each route sent its worst allowed input (docs/limits.md "What each route costs at most"): what serving it
allocates (tracemalloc, in-process) and the queries it runs (SQLAlchemy, counted; each reads a bounded batch) stay within generous
ceilings set by the limits, not by what a tenant stored. Limits are scaled down so the worst case is cheap
to set up; the ceilings are relative to those limits. No wall-clock gates."""

from __future__ import annotations

import json
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


@contextmanager
def measured(hub) -> Iterator[Cost]:
    """Peak bytes allocated and SELECT statements run while the block runs."""
    cost = Cost()
    engine = hub.client.app.state.engine.sync_engine

    def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        cost.queries += statement.lstrip().upper().startswith("SELECT")

    event.listen(engine, "after_cursor_execute", count)
    tracemalloc.start()
    try:
        yield cost
        cost.peak = tracemalloc.get_traced_memory()[1]
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
