"""Which fleet peers hold a pull's layers (``POST /api/v1/repositories/{ns}/{repo}/peers``, registry/fleet/peers.py):
only fresh hosts that reported a peer URL and hold the layer whole, never the asker, pull permission on the
repository and per layer, hostile questions refused naming the field, and the ``peerUrl`` fact checked."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from manifest.bitmap import encode_bitmap, pack_bits
from tests.hub_server.conftest import Hub, hub_on_template
from tests.hub_server.pushing import auth, expect_error
from tests.hub_server.registry.fleet.test_inventory import _push_fleet, fleet_template, full, report

__all__ = ["fleet_template"]  # the session template of test_inventory, shared


@pytest.fixture
def hub(make_hub: Callable[..., Hub], request: pytest.FixtureRequest) -> Hub:
    return hub_on_template(request, make_hub, "fleet", "fleet_template")


@pytest.fixture
def fleet(hub: Hub, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """What test_inventory's ``_push_fleet`` pushed (acme/py, other/secret, pub/base)."""
    if hub.template is not None:
        return request.getfixturevalue("fleet_template")[1]
    return _push_fleet(hub, tmp_path)


def with_peer(layers: list[str], url: str | None, **extra: Any) -> dict[str, Any]:
    body = full(layers, **extra)
    if url is not None:
        body["facts"]["peerUrl"] = url
    return body


def ask(hub: Hub, token: str | None, layers: Any, repo: str = "acme/py", **body: Any):
    return hub.client.post(
        f"/api/v1/repositories/{repo}/peers",
        json={"layers": layers, **body},
        headers=auth(token) if token else {},
    )


def hosts(answer: Any, layer: str) -> list[str]:
    return sorted(p["host"] for p in answer.json()["peers"][layer])


def test_only_fresh_hosts_with_a_peer_url_holding_the_layer_whole_are_named(hub: Hub, fleet):
    py = fleet["py"]
    bits = {"memory.bin": {"chunks": 64, "present": encode_bitmap(pack_bits(64, range(64)))}}
    for host, body in {
        "a": with_peer(py, "http://10.0.0.1:7480"),
        "b": with_peer(py[:1], "http://10.0.0.2:7480"),  # holds the base only
        "c": with_peer(py, None),  # no peer server
        "d": with_peer([], "http://10.0.0.4:7480", partial=[{"layer": py[1], "kind": "pull", "files": bits}]),
    }.items():
        answer = report(hub, host, hub.token(host, "node:acme/*"), body)
        assert answer.status_code == 200, answer.text
    puller = hub.token("puller", "pull:acme/*")
    answer = ask(hub, puller, py)
    assert answer.status_code == 200, answer.text
    assert hosts(answer, py[0]) == ["a", "b"] and hosts(answer, py[1]) == ["a"] and hosts(answer, py[2]) == ["a"]
    assert answer.json()["peers"][py[1]] == [{"host": "a", "url": "http://10.0.0.1:7480"}]
    assert hosts(ask(hub, puller, py, host="a"), py[0]) == ["b"]  # the asker is never its own peer
    ctx = hub.registry.ctx
    start = ctx.clock()
    ctx.clock = lambda: start + timedelta(seconds=301)  # past the 300 s node TTL
    try:
        assert ask(hub, puller, py).json()["peers"] == {layer: [] for layer in py}
    finally:
        ctx.clock = type(ctx).clock  # type: ignore[method-assign]


def test_at_most_eight_peers_per_layer_spread_over_the_holders(hub: Hub, fleet):
    py = fleet["py"]
    for i in range(12):
        name = f"h{i}"
        assert (
            report(hub, name, hub.token(name, "node:acme/*"), with_peer(py[:1], f"http://10.0.1.{i}:7480")).status_code
            == 200
        )
    puller = hub.token("puller", "pull:acme/*")
    seen: set[tuple[str, ...]] = set()
    named: set[str] = set()
    for _ in range(8):
        found = [p["host"] for p in ask(hub, puller, py[:1]).json()["peers"][py[0]]]
        assert len(found) == 8 and len(set(found)) == 8
        seen.add(tuple(found))
        named.update(found)
    assert len(seen) > 1 and len(named) > 8  # shuffled: sixteen pullers do not all pick the same peers


def test_pull_on_the_repository_and_on_each_layer_is_required(hub: Hub, fleet):
    py, secret = fleet["py"], fleet["secret"]
    admin = hub.token("x", "node:acme/*", "node:other/*")
    assert report(hub, "x", admin, with_peer([*py, secret], "http://10.0.0.1:7480")).status_code == 200
    expect_error(ask(hub, None, py), 401, "UNAUTHORIZED")
    expect_error(ask(hub, hub.token("stranger", "pull:other/*"), py), 404, "NAME_UNKNOWN")
    # a layer of a repository the caller cannot read is answered like one nobody holds
    answer = ask(hub, hub.token("puller", "pull:acme/*"), [py[0], secret])
    assert hosts(answer, py[0]) == ["x"] and hosts(answer, secret) == []
    assert hosts(ask(hub, hub.token("both", "pull:acme/*", "pull:other/*"), [secret]), secret) == ["x"]


def test_hostile_questions_are_refused_naming_the_field(hub: Hub, fleet):
    puller = hub.token("puller", "pull:acme/*")
    digest = fleet["py"][0]
    assert expect_error(ask(hub, puller, [digest] * 65), 400, "INVALID_REQUEST") == {"field": "layers"}
    assert expect_error(ask(hub, puller, []), 400, "INVALID_REQUEST") == {"field": "layers"}
    assert expect_error(ask(hub, puller, [digest, "sha256:nothex"]), 400, "INVALID_REQUEST") == {"field": "layers[1]"}
    assert expect_error(ask(hub, puller, [digest], host="bad name!"), 400, "INVALID_REQUEST") == {"field": "host"}
    expect_error(ask(hub, puller, "not a list"), 400, "INVALID_REQUEST")
    refused = hub.client.post(
        "/api/v1/repositories/acme/py/peers", content=b"{", headers={**auth(puller), "content-type": "application/json"}
    )
    expect_error(refused, 400, "INVALID_REQUEST")


@pytest.mark.parametrize(
    "url",
    ["ftp://10.0.0.1/", "http://user:pw@10.0.0.1:1", "http://10.0.0.1:1/?q=1", "http://" + "a" * 300, "javascript:x"],
)
def test_a_bad_peer_url_fact_is_refused(hub: Hub, fleet, url: str):
    node = hub.token("h1", "node:acme/*")
    detail = expect_error(report(hub, "h1", node, with_peer(fleet["py"], url)), 400, "INVALID_REQUEST")
    assert detail == {"field": "facts.peerUrl"}
