"""bench/fleet_sim.py, the fleet-distribution model: its hub-only time is the closed form, a swarm beats the
hub where the hub's egress is the bottleneck, mirrors fetch the chain once each, every host completes, and a
seed fixes the result."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MiB = 1 << 20


def load_fleet_sim() -> ModuleType:
    """bench/fleet_sim.py as a module (bench/ is not a package: its modules import ``common`` by bare name,
    which is forgotten again so no other test sees bench/ on the path)."""
    saved, known = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("fleet_sim_under_test", BENCH / "fleet_sim.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
        for name in set(sys.modules) - known - {"fleet_sim_under_test"}:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(BENCH)):
                del sys.modules[name]
    return module


sim = load_fleet_sim()


def model(hosts: int, **kw: object):
    """A tiny fleet: a 64 MiB chain in 1 MiB pieces, 1 GB/s hosts, a hub of 100 MB/s (the bottleneck)."""
    base: dict[str, object] = {"hosts": hosts, "size": 64 * MiB, "piece": MiB, "download": 1e9, "upload": 1e9}
    return sim.Model(**{**base, "hub": 1e8, "conns": 4, **kw})


@pytest.mark.parametrize("hosts", [1, 7, 20])
def test_hub_only_takes_the_closed_form_time(hosts: int):
    m = model(hosts)
    out = sim.simulate("a", m, seed=1)
    closed = hosts * m.size / m.hub
    assert out.completed == hosts
    assert abs(out.max_s - closed) <= m.step, (out.max_s, closed, m.step)
    assert out.hub_egress == hosts * m.size


def test_hub_only_is_limited_by_the_hosts_nic_when_the_hub_is_not_the_bottleneck():
    m = model(2, hub=1e12)
    out = sim.simulate("a", m, seed=1)
    assert abs(out.max_s - m.size / m.download) <= m.step


def test_a_swarm_finishes_far_sooner_than_the_hub_alone_and_the_hub_sends_less():
    m = model(30)
    hub, peers = sim.simulate("a", m, seed=1), sim.simulate("c", m, seed=1)
    assert peers.completed == hub.completed == 30
    assert peers.max_s < hub.max_s / 5, (peers.max_s, hub.max_s)
    assert peers.hub_egress < hub.hub_egress / 5
    assert peers.hub_egress >= m.size  # every piece came from the hub at least once


@pytest.mark.parametrize("policy", ["rarest", "random"])
def test_every_host_completes_and_a_seed_fixes_the_result(policy: str):
    m = model(25, policy=policy, tries=1)
    first, again = sim.simulate("c", m, seed=7), sim.simulate("c", m, seed=7)
    assert first.completed == 25
    assert (first.p50_s, first.p99_s, first.max_s, first.hub_egress) == (
        again.p50_s,
        again.p99_s,
        again.max_s,
        again.hub_egress,
    )


@pytest.mark.parametrize("mirrors", [1, 3])
def test_mirrors_fetch_the_chain_once_each_and_serve_their_hosts(mirrors: int):
    m = model(12, mirrors=mirrors, mirror=2e8)
    out = sim.simulate("b", m, seed=1)
    assert out.completed == 12
    assert out.hub_egress == mirrors * m.size
    # the slower of a mirror's egress shared by its hosts and the hub's shared by the mirrors (pull-through:
    # a host takes what its mirror holds, so the two overlap)
    closed = max((12 / mirrors) * m.size / m.mirror, mirrors * m.size / m.hub)
    # after the mirror's last piece, its hosts still fetch that piece, at the mirror's pieces per step
    tail = (math.ceil((12 / mirrors) / m.slots(m.mirror)) + 1) * m.step
    assert closed - m.step <= out.max_s <= closed + tail, (out.max_s, closed, tail)


def test_hosts_on_a_slower_link_finish_at_their_own_rate_without_holding_up_the_swarm():
    m = model(20, hub=1e9, slow_share=0.1, slow=1e8)
    out = sim.simulate("c", m, seed=3)
    assert out.completed == 20
    assert abs(out.max_s - m.size / m.slow) <= 2 * m.step, (out.max_s, m.size / m.slow)
    assert out.p50_s < out.max_s / 5


def test_peers_that_serve_only_whole_chains_gain_little_when_every_host_starts_at_once():
    m = model(30)
    hub, whole = sim.simulate("a", m, seed=1), sim.simulate("c", sim.Model(**{**m.__dict__, "whole": True}), seed=1)
    assert whole.completed == 30
    assert whole.max_s > hub.max_s / 2  # the hub's fair share finishes nobody early: few seeds, late
