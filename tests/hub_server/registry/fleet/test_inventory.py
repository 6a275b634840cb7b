"""Inventory reports and placement through the app (docs/placement.md), on SQLite and PostgreSQL: the
incremental protocol, the TTL, and every hostile report refused with a clear error and nothing written."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hub_server.settings import Limits
from manifest.bitmap import encode_bitmap, pack_bits
from tests.hub_server.conftest import Hub, hub_on_template, stopped_hub_with
from tests.hub_server.pushing import auth, chain_images, expect_error

QEMU = {
    "vmm": "qemu-microvm",
    "vmmVersion": "7.2.22",
    "machine": "microvm",
    "accel": "tcg",
    "arch": "x86_64",
    "cpu": "max",
}


def full(layers: list[str], **extra: Any) -> dict[str, Any]:
    return {"mode": "full", "layers": layers, "facts": {"vmms": [QEMU], "freeMemory": 1 << 30}, **extra}


def _push_fleet(hub: Hub, work: Path) -> dict[str, Any]:
    """acme/py (private, three links, tag head), other/secret (private), pub/base (public): the digests."""
    (work / "images").mkdir()
    images = chain_images(work / "images")
    pusher = hub.pusher(hub.token("admin", "admin"))
    layers = [x.digest for x in pusher.push_chain("acme/py", images, work / "py", "head")]
    secret = pusher.push_chain("other/secret", [(images[0][0], b"secret")], work / "secret", "v1")[0]
    images2 = [(images[1][0], b"another vmstate" * 10)]
    public = pusher.push_chain("pub/base", images2, work / "pub", "v1", public=True)[0]
    return {"py": layers, "secret": secret.digest, "public": public.digest, "secret_layer": secret}


@pytest.fixture(scope="session")
def fleet_template(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> tuple[Path, dict[str, Any]]:
    """The pushed repositories below, once per session on SQLite (each test's hub starts on a copy)."""
    return stopped_hub_with(tmp_path_factory.mktemp("fleet-template"), sqlite_template, _push_fleet)


@pytest.fixture
def hub(make_hub: Callable[..., Hub], request: pytest.FixtureRequest) -> Hub:
    return hub_on_template(request, make_hub, "fleet", "fleet_template")


@pytest.fixture
def fleet(hub: Hub, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """What :func:`_push_fleet` pushed: copied from the session's template on SQLite, pushed here otherwise."""
    if hub.template is not None:
        return request.getfixturevalue("fleet_template")[1]
    return _push_fleet(hub, tmp_path)


def report(hub: Hub, host: str, token: str | None, body: Any, **kw: Any):
    headers = auth(token) if token else {}
    if isinstance(body, (bytes, str)):
        return hub.client.post(f"/api/v1/nodes/{host}/reports", content=body, headers=headers, **kw)
    return hub.client.post(f"/api/v1/nodes/{host}/reports", json=body, headers=headers, **kw)


def place(hub: Hub, token: str | None, reference: str = "acme/py:head", **body: Any):
    return hub.client.post(
        "/api/v1/placement", json={"reference": reference, **body}, headers=auth(token) if token else {}
    )


def test_full_then_delta_reports_and_a_stale_delta(hub: Hub, fleet):
    node = hub.token("h1", "node:acme/*")
    py = fleet["py"]
    first = report(hub, "h1", node, full(py[:2]))
    assert first.status_code == 200, first.text
    assert first.json() == {"host": "h1", "generation": 1, "layers": 2, "partial": 0, "expiresIn": 300.0}
    delta = {"mode": "delta", "base": 1, "add": [py[2]], "remove": [py[0]], "facts": {"vmms": [QEMU]}}
    assert report(hub, "h1", node, delta).json()["layers"] == 2
    stale = expect_error(report(hub, "h1", node, delta), 409, "INVENTORY_STALE")
    assert stale == {"host": "h1", "generation": 2}
    fresh = hub.token("h2", "node:acme/*")
    assert expect_error(report(hub, "h2", fresh, delta), 409, "INVENTORY_STALE") == {"host": "h2", "generation": 0}
    ranked = place(hub, node).json()["ranked"]
    assert [(r["host"], [link["held"] for link in r["links"]]) for r in ranked] == [("h1", [False, True, True])]


def test_a_host_reports_only_as_itself_with_a_node_token(hub: Hub, fleet):
    body = full(fleet["py"])
    h1 = hub.token("h1", "node:acme/*")
    assert "reports as host 'h1' only, not 'h2'" in report(hub, "h2", h1, body).json()["errors"][0]["message"]
    expect_error(report(hub, "h2", h1, body), 403, "DENIED")
    puller = hub.token("h3", "pull:acme/*", "push:acme/*")
    assert "has no node scope" in expect_error_message(report(hub, "h3", puller, body), 403, "DENIED")
    expect_error(report(hub, "h1", None, body), 401, "UNAUTHORIZED")
    expect_error(report(hub, "bad name!", h1, body), 400, "INVALID_REQUEST")
    assert place(hub, h1).json()["ranked"] == []  # nothing was stored


def expect_error_message(response, status: int, code: str) -> str:
    expect_error(response, status, code)
    return response.json()["errors"][0]["message"]


def test_layers_the_token_cannot_report_are_refused_alike_whether_they_exist_or_not(hub: Hub, fleet):
    node = hub.token("h1", "node:acme/*")
    unknown = "sha256:" + "0" * 64
    for digest in (fleet["secret"], unknown):
        detail = expect_error(report(hub, "h1", node, full([fleet["py"][0], digest])), 403, "DENIED")
        assert detail == {"layers": [digest], "refused": 1}
    # in part too
    bitmap = {"memory.bin": {"chunks": 64, "present": encode_bitmap(pack_bits(64, [0]))}}
    body = full([], partial=[{"layer": fleet["secret"], "kind": "pull", "files": bitmap}])
    assert expect_error(report(hub, "h1", node, body), 403, "DENIED")["layers"] == [fleet["secret"]]
    # a public repository's layers may be reported by any node
    assert report(hub, "h1", node, full([fleet["public"], fleet["py"][0]])).status_code == 200
    # a blob is not a layer
    blob = next(iter(fleet["secret_layer"].data_blobs))
    assert expect_error(report(hub, "root", hub.token("root", "admin"), full([blob])), 403, "DENIED")["layers"] == [
        blob
    ]


@pytest.mark.parametrize(
    ("body", "status", "code", "needle"),
    [
        (b"{not json", 400, "INVALID_REQUEST", "not valid JSON"),
        ({"mode": "sideways"}, 400, "INVALID_REQUEST", "mode"),
        ({"mode": "full", "layers": "sha256:x"}, 400, "INVALID_REQUEST", "layers"),
        ({"mode": "full", "layers": ["sha256:" + "A" * 64]}, 400, "INVALID_REQUEST", "layers[0]"),
        ({"mode": "full", "add": ["sha256:" + "1" * 64]}, 400, "INVALID_REQUEST", "a full report lists 'layers' only"),
        ({"mode": "full", "base": 3}, 400, "INVALID_REQUEST", "a full report lists 'layers' only"),
        ({"mode": "delta", "add": []}, 400, "INVALID_REQUEST", "'base'"),
        ({"mode": "full", "unknown": 1}, 400, "INVALID_REQUEST", "unknown"),
        ({"mode": "full", "facts": {"labels": {"zone": "a b"}}}, 400, "INVALID_REQUEST", "label"),
        ({"mode": "full", "facts": {"freeMemory": -1}}, 400, "INVALID_REQUEST", "freeMemory"),
        ({"mode": "full", "facts": {"vmms": [dict(QEMU, vmm="qemu\n")]}}, 400, "INVALID_REQUEST", "vmms[0].vmm"),
        (
            {
                "mode": "full",
                "partial": [
                    {"layer": "sha256:" + "1" * 64, "kind": "pull", "files": {"x.bin": {"chunks": 1, "present": ""}}}
                ],
            },
            400,
            "INVALID_REQUEST",
            "file roles",
        ),
        (
            {
                "mode": "full",
                "partial": [
                    {
                        "layer": "sha256:" + "1" * 64,
                        "kind": "pull",
                        "files": {
                            "memory.bin": {
                                "chunks": 8,
                                "present": base64.b64encode(zlib.compress(bytes(32 << 20))).decode(),
                            }
                        },
                    }
                ],
            },
            400,
            "INVALID_REQUEST",
            "exactly 1 bytes",
        ),
        ([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], 400, "INVALID_REQUEST", ""),
    ],
)
def test_malformed_reports_are_refused_naming_what_is_wrong(hub: Hub, fleet, body, status, code, needle):
    node = hub.token("h1", "node:acme/*")
    message = expect_error_message(report(hub, "h1", node, body), status, code)
    assert needle in message
    assert place(hub, node).json()["ranked"] == []


def test_a_huge_report_is_refused_before_it_is_read(hub: Hub, fleet):
    node = hub.token("h1", "node:acme/*")
    huge = b'{"mode": "full", "layers": [' + (b'"sha256:' + b"0" * 64 + b'",') * 20_000
    detail = expect_error(report(hub, "h1", node, huge), 413, "TOO_LARGE")
    assert detail["limit"] == 1 << 20


def test_too_many_layers_and_a_bitmap_of_the_wrong_size_are_refused(make_hub, images, tmp_path):
    hub = make_hub(limits=replace(Limits(), host_layers=2))
    py = [
        x.digest for x in hub.pusher(hub.token("admin", "admin")).push_chain("acme/py", images, tmp_path / "p", "head")
    ]
    node = hub.token("h1", "node:acme/*")
    assert expect_error(report(hub, "h1", node, full(py)), 413, "TOO_LARGE") == {"field": "layers", "limit": 2}
    assert report(hub, "h1", node, full(py[:2])).status_code == 200
    grow = {"mode": "delta", "base": 1, "add": [py[2]]}
    assert expect_error(report(hub, "h1", node, grow), 413, "TOO_LARGE") == {"field": "add", "limit": 2}
    assert report(hub, "h1", node, {"mode": "delta", "base": 1}).json()["generation"] == 2  # nothing half-written
    wrong = {"memory.bin": {"chunks": 63, "present": encode_bitmap(pack_bits(63, [0]))}}
    message = expect_error_message(
        report(hub, "h1", node, full(py[:1], partial=[{"layer": py[2], "kind": "pull", "files": wrong}])),
        400,
        "INVALID_REQUEST",
    )
    assert f"layer {py[2]} has 80 chunks, the bitmap 63" in message


def test_node_tokens_read_and_push_no_content(hub: Hub, fleet, images, tmp_path):
    node = hub.token("h1", "node:acme/*")
    head = fleet["py"][-1]
    for path in (
        "/v2/acme/py/manifests/head",
        f"/v2/acme/py/manifests/{head}",
        "/v2/acme/py/tags/list",
        "/api/v1/repositories/acme/py/chain/head",
        "/api/v1/repositories/acme/py",
    ):
        expect_error(hub.client.get(path, headers=auth(node)), 404, "NAME_UNKNOWN")
    expect_error(hub.client.post("/v2/acme/py/blobs/uploads/", headers=auth(node)), 403, "DENIED")
    expect_error(hub.client.put("/v2/acme/py/manifests/x", content=b"{}", headers=auth(node)), 403, "DENIED")
    token = hub.client.get(
        "/v2/token", params={"scope": ["registry:catalog:*", "repository:acme/py:pull,push"]}, headers=auth(node)
    ).json()["token"]
    expect_error(hub.client.get("/v2/acme/py/manifests/head", headers=auth(token)), 404, "NAME_UNKNOWN")
    assert hub.client.get("/v2/_catalog", headers=auth(token)).json()["repositories"] == ["pub/base"]  # public only


def test_placement_is_read_like_the_repository(hub: Hub, fleet):
    node = hub.token("h1", "node:acme/*")
    assert place(hub, node).status_code == 200
    assert place(hub, hub.token("reader", "pull:acme/*")).status_code == 200
    for reference in ("other/secret:v1", "other/nothing:v1"):  # a node never learns of what it cannot read
        expect_error(place(hub, node, reference), 404, "NAME_UNKNOWN")
    expect_error(place(hub, None), 401, "UNAUTHORIZED")
    assert place(hub, None, "pub/base:v1").status_code == 200
    expect_error(place(hub, node, "acme/py:nosuch"), 404, "MANIFEST_UNKNOWN")
    expect_error(place(hub, node, "acme"), 400, "NAME_INVALID")
    expect_error(place(hub, node, "acme/py:bad tag"), 400, "NAME_INVALID")


def test_a_silent_host_expires_and_is_purged_after_ten_ttls(hub: Hub, fleet):
    ctx = hub.registry.ctx
    start = ctx.clock()
    h1, h2 = hub.token("h1", "node:acme/*"), hub.token("h2", "node:acme/*")
    assert report(hub, "h1", h1, full(fleet["py"])).status_code == 200
    ctx.clock = lambda: start + timedelta(seconds=301)
    try:
        answer = place(hub, h1).json()
        assert answer["ranked"] == []
        assert [(e["host"], e["kind"]) for e in answer["excluded"]] == [("h1", "expired")]
        ctx.clock = lambda: start + timedelta(seconds=3001)
        assert report(hub, "h2", h2, full([])).status_code == 200  # the report that purges h1
        answer = place(hub, h1, hosts=["h1", "h2"]).json()
        assert [r["host"] for r in answer["ranked"]] == ["h2"]
        assert answer["excluded"] == [
            {"host": "h1", "kind": "unknown", "reason": "no inventory: this host never reported"}
        ]
    finally:
        ctx.clock = type(ctx).clock  # type: ignore[method-assign]


def test_a_partial_layer_is_accepted_and_counted(hub: Hub, fleet):
    node = hub.token("h1", "node:acme/*")
    py = fleet["py"]
    bits = {"memory.bin": {"chunks": 64, "present": encode_bitmap(pack_bits(64, range(64)))}}
    answer = report(hub, "h1", node, full(py[:1], partial=[{"layer": py[1], "kind": "pull", "files": bits}]))
    assert answer.json()["partial"] == 1
    ranked = place(hub, node).json()["ranked"][0]
    chain = place(hub, node).json()["chain"]
    # link 1's own chunks are held by the staged files: only its vmstate and link 2 remain
    assert ranked["links"][1]["missingBytes"] < chain[1]["bytes"]
