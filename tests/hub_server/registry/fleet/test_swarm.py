"""The hub's swarm tracker (registry/fleet/swarm.py, through ``POST …/peers`` with ``pulling: true``): the hosts
pulling a layer now, with a fresh report and a peer URL, sorted by name and the asker included; entries expire;
asks in one cohort window all get the same list; bounds, hostile questions and pull permission."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hub_server.registry.fleet import swarm as swarm_module
from hub_server.registry.fleet.swarm import SwarmTracker
from tests.hub_server.conftest import Hub, hub_on_template
from tests.hub_server.pushing import expect_error
from tests.hub_server.registry.fleet.test_inventory import _push_fleet, fleet_template, report
from tests.hub_server.registry.fleet.test_peers import ask, with_peer

__all__ = ["fleet_template"]


@pytest.fixture
def hub(make_hub: Callable[..., Hub], request: pytest.FixtureRequest) -> Hub:
    return hub_on_template(request, make_hub, "fleet", "fleet_template")


@pytest.fixture
def fleet(hub: Hub, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    if hub.template is not None:
        return request.getfixturevalue("fleet_template")[1]
    return _push_fleet(hub, tmp_path)


def members(answer: Any, layer: str) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [p["host"] for p in answer.json()["swarm"][layer]]


def hosts_reporting(hub: Hub, *names: str, url: bool = True) -> None:
    for name in names:
        body = with_peer([], f"http://10.0.0.{ord(name[0]) % 250}:7480" if url else None)
        answer = report(hub, name, hub.token(name, "node:acme/*"), body)
        assert answer.status_code == 200, answer.text


def test_pullers_are_listed_sorted_with_their_urls_the_asker_included(hub: Hub, fleet):
    hub.registry.peers.tracker.window = 0
    py = fleet["py"]
    hosts_reporting(hub, "c", "a", "b")
    hosts_reporting(hub, "quiet", url=False)  # no peer server: never a member
    puller = hub.token("puller", "pull:acme/*")
    assert members(ask(hub, puller, py[:1], host="c", pulling=True), py[0]) == ["c"]
    ask(hub, puller, py[:2], host="a", pulling=True)
    ask(hub, puller, py[:1], host="quiet", pulling=True)
    answer = ask(hub, puller, py, host="b", pulling=True)
    assert members(answer, py[0]) == ["a", "b", "c"] and members(answer, py[1]) == ["a", "b"]
    assert answer.json()["swarm"][py[0]][0] == {"host": "a", "url": "http://10.0.0.97:7480"}
    assert ask(hub, puller, py).json()["swarm"] == {}  # not pulling: holders only, nothing recorded
    assert members(ask(hub, puller, py[:1], host="zz", pulling=True), py[0]) == ["a", "b", "c"]  # zz: no report


def test_entries_expire_after_the_ttl(hub: Hub, fleet):
    tracker = hub.registry.peers.tracker
    tracker.window = 0
    now = [1000.0]
    tracker.clock = lambda: now[0]
    py = fleet["py"]
    hosts_reporting(hub, "a", "b")
    puller = hub.token("puller", "pull:acme/*")
    ask(hub, puller, py[:1], host="a", pulling=True)
    now[0] += swarm_module.ENTRY_TTL_S - 1
    assert members(ask(hub, puller, py[:1], host="b", pulling=True), py[0]) == ["a", "b"]
    now[0] += 2  # a's entry expired, b's was refreshed a second ago
    assert members(ask(hub, puller, py[:1], host="b", pulling=True), py[0]) == ["b"]


def test_every_ask_of_a_cohort_window_gets_the_same_list(hub: Hub, fleet):
    hub.registry.peers.tracker.window = 0.5
    py = fleet["py"]
    names = ["h1", "h2", "h3", "h4"]
    hosts_reporting(hub, *names)
    puller = hub.token("puller", "pull:acme/*")
    got: dict[str, list[str]] = {}

    def pull(name: str) -> None:
        got[name] = members(ask(hub, puller, py, host=name, pulling=True), py[-1])

    threads = [threading.Thread(target=pull, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert got == dict.fromkeys(names, names)
    # after the window: answered at once, with the current list (an asker allowing no wait at all too)
    assert members(ask(hub, puller, py, host="h5", pulling=True, window=0), py[-1]) == names


def test_a_layer_a_fresh_peer_holds_whole_does_not_wait_for_its_cohort(hub: Hub, fleet):
    hub.registry.peers.tracker.window = 5.0
    py = fleet["py"]
    holder = report(hub, "a", hub.token("a", "node:acme/*"), with_peer(py, "http://10.0.0.1:7480"))
    assert holder.status_code == 200, holder.text
    hosts_reporting(hub, "b")
    start = time.monotonic()
    answer = ask(hub, hub.token("puller", "pull:acme/*"), py, host="b", pulling=True)
    assert time.monotonic() - start < 2.5  # the window is 5 s
    assert members(answer, py[0]) == ["b"] and [p["host"] for p in answer.json()["peers"][py[0]]] == ["a"]


def test_an_asker_may_wait_less_than_the_window(hub: Hub, fleet):
    hub.registry.peers.tracker.window = 5.0
    py = fleet["py"]
    hosts_reporting(hub, "a", "b")
    puller = hub.token("puller", "pull:acme/*")
    start = time.monotonic()
    assert members(ask(hub, puller, py, host="a", pulling=True, window=0), py[0]) == ["a"]  # opens the window
    assert time.monotonic() - start < 2.5
    start = time.monotonic()
    assert members(ask(hub, puller, py, host="b", pulling=True, window=0.3), py[0]) == ["a", "b"]
    assert 0.25 <= time.monotonic() - start < 2.5


def test_the_tracker_is_bounded() -> None:
    now = [0.0]
    tracker = SwarmTracker(0.2, clock=lambda: now[0])
    old = swarm_module.MAX_ENTRIES
    swarm_module.MAX_ENTRIES = 3
    try:
        for host in ["a", "b", "c", "d"]:
            tracker.join(host, ["sha256:" + "1" * 64])
    finally:
        swarm_module.MAX_ENTRIES = old
    assert tracker.members("sha256:" + "1" * 64) == ["b", "c", "d"]  # the oldest dropped
    layer = "sha256:" + "2" * 64
    tracker.join("a", [layer])
    waits = swarm_module.MAX_WAITERS

    async def crowd() -> float:
        start = asyncio.get_running_loop().time()
        swarm_module.MAX_WAITERS = 2
        try:
            await asyncio.gather(*(tracker.wait_for_cohort([layer]) for _ in range(2)), _late(tracker, layer))
        finally:
            swarm_module.MAX_WAITERS = waits
        return asyncio.get_running_loop().time() - start

    assert asyncio.run(crowd()) >= 0.15  # the two in the window slept it out; the third (over the bound) did not


async def _late(tracker: SwarmTracker, layer: str) -> None:
    await asyncio.sleep(0.01)
    start = asyncio.get_running_loop().time()
    await tracker.wait_for_cohort([layer])
    assert asyncio.get_running_loop().time() - start < 0.1


def test_hostile_pulling_questions_are_refused_naming_the_field(hub: Hub, fleet):
    puller = hub.token("puller", "pull:acme/*")
    py = fleet["py"]
    assert expect_error(ask(hub, puller, py, pulling=True), 400, "INVALID_REQUEST") == {"field": "host"}
    for window in (-1, 11, "soon", True):
        refused = ask(hub, puller, py, host="a", pulling=True, window=window)
        assert refused.status_code == 400, refused.text
    assert expect_error(ask(hub, puller, py, host="a", pulling=True, window=11), 400, "INVALID_REQUEST") == {
        "field": "window"
    }
    expect_error(ask(hub, puller, py, host="a", pulling="yes"), 400, "INVALID_REQUEST")


def test_pull_permission_is_required_and_unreadable_layers_track_nobody(hub: Hub, fleet):
    hub.registry.peers.tracker.window = 0
    py, secret = fleet["py"], fleet["secret"]
    hosts_reporting(hub, "a")
    expect_error(ask(hub, None, py, host="a", pulling=True), 401, "UNAUTHORIZED")
    expect_error(ask(hub, hub.token("s", "pull:other/*"), py, host="a", pulling=True), 404, "NAME_UNKNOWN")
    answer = ask(hub, hub.token("puller", "pull:acme/*"), [secret], host="a", pulling=True)
    assert members(answer, secret) == []
    assert hub.registry.peers.tracker.members(secret) == []
