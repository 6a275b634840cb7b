"""The arithmetic of placement (registry/fleet/ranking.py and placement.rank_hosts), on layers built by hand.

The chain: base (a0..a3) → link1 (b1 new; a0 again at index 5; index 6 zeroed) → link2 (c2 new; b1 again at
index 7). A foreign layer F of another chain holds b1 and c2. Frame lengths: base 1000 each, b1 500, c2 300;
each vmstate 100.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from hub_server.registry.fleet.hostcheck import Constraints
from hub_server.registry.fleet.placement import PlacementRequest, rank_hosts
from hub_server.registry.fleet.ranking import ChainUniverse
from hub_server.registry.fleet.reports import HostFacts, VmmFacts
from tests.hub_server.registry.fleet.facts import NOW, QEMU, chunk, host, index_of, layer, partial

BASE = layer("base", [(0, "a0", 1000), (1, "a1", 1000), (2, "a2", 1000), (3, "a3", 1000)])
LINK1 = layer("link1", [(1, "b1", 500), (5, "a0", 990), (6, None, 0)], parent=BASE.digest)
LINK2 = layer("link2", [(2, "c2", 300), (7, "b1", 480)], parent=LINK1.digest)
FOREIGN = layer("foreign", [(0, "b1", 500), (1, "c2", 300), (2, "zz", 700)])


def universe() -> ChainUniverse:
    return ChainUniverse([BASE, LINK1, LINK2])


def per_link(missing) -> list[int]:
    return [link.missing_bytes for link in missing.links]


def test_each_distinct_chunk_counts_once_as_the_frame_of_the_first_link_listing_it() -> None:
    u = universe()
    assert u.owned == [4000, 500, 300]  # a0 again in link1 and b1 again in link2 are not counted twice
    assert u.total == 4800 + 300
    nothing = u.missing(0)
    assert per_link(nothing) == [4100, 600, 400]
    assert nothing.total == u.total and nothing.chunks == 6
    assert [link.held for link in nothing.links] == [False, False, False]


def test_a_held_link_costs_nothing_and_its_chunks_help_the_links_above() -> None:
    u = universe()
    base_only = u.missing(u.mask_of([BASE.digest]))
    assert per_link(base_only) == [0, 600, 400]
    assert [link.held for link in base_only.links] == [True, False, False]
    assert per_link(u.missing(u.mask_of([BASE.digest, LINK1.digest]))) == [0, 0, 400]


def test_chunks_a_foreign_layer_holds_are_not_missing_once_it_is_examined() -> None:
    u = universe()
    mask = u.mask_of([FOREIGN.digest])
    assert mask == 0  # not relevant before it is examined
    assert u.examine({FOREIGN.digest: FOREIGN}) == 1
    assert u.examine({FOREIGN.digest: FOREIGN}) == 0  # once
    unrelated = layer("unrelated", [(0, "nope", 10)])
    assert u.examine({unrelated.digest: unrelated}) == 0
    assert unrelated.digest not in u.bits
    assert per_link(u.missing(u.mask_of([FOREIGN.digest]))) == [4100, 100, 100]
    assert u.unexamined([FOREIGN.digest, unrelated.digest, "sha256:new"]) == ["sha256:new"]


def test_masks_come_from_the_holders_of_relevant_layers_only() -> None:
    u = universe()
    u.examine({FOREIGN.digest: FOREIGN})
    holders = {BASE.digest: {"h1", "h2"}, FOREIGN.digest: {"h2"}, "sha256:elsewhere": {"h3"}}
    masks = u.masks(holders)
    assert masks == {"h1": u.bits[BASE.digest], "h2": u.bits[BASE.digest] | u.bits[FOREIGN.digest]}
    assert u.missing(masks["h1"]) is u.missing(masks["h1"])  # hosts with one mask share one answer


def test_an_interrupted_pull_of_a_link_holds_what_its_staged_files_hold() -> None:
    u = universe()
    mask = u.mask_of([BASE.digest])
    staged = host("h", [BASE], partial=[partial(LINK1, "pull", [1])])
    assert per_link(u.missing_for(staged, mask)) == [0, 100, 400]  # b1 resumed; link1's vmstate still comes
    # a chunk owned by an earlier link is fetched by that link, whatever a later link's staged files hold
    later = host("h", [BASE], partial=[partial(LINK2, "pull", [7])])
    assert per_link(u.missing_for(later, mask)) == [0, 600, 400]
    assert per_link(u.missing_for(host("h", [BASE], partial=[partial(LINK2, "pull", [2])]), mask)) == [0, 600, 100]
    # a link held whole is not pulled: its staged files do not matter
    held = host("h", [BASE, LINK1], partial=[partial(LINK1, "pull", [1])])
    assert per_link(u.missing_for(held, u.mask_of([BASE.digest, LINK1.digest]))) == [0, 0, 400]


def test_a_chunk_at_two_places_of_a_link_is_resumed_only_when_both_are_there() -> None:
    twice = layer("twice", [(3, "q", 200), (4, "q", 200)], parent=BASE.digest)
    u = ChainUniverse([BASE, twice])
    mask = u.mask_of([BASE.digest])
    one = host("h", [BASE], partial=[partial(twice, "pull", [3])])
    both = host("h", [BASE], partial=[partial(twice, "pull", [3, 4])])
    assert per_link(u.missing_for(one, mask)) == [0, 300]
    assert per_link(u.missing_for(both, mask)) == [0, 100]


def test_a_lazy_session_of_the_head_holds_chunks_of_every_link() -> None:
    u = universe()
    assert u.image()[:8] == (chunk("a0"), chunk("b1"), chunk("c2"), chunk("a3"), None, chunk("a0"), None, chunk("b1"))
    lazy = host("h", partial=[partial(LINK2, "lazy", [0, 1, 2, 6])])
    assert per_link(u.missing_for(lazy, 0)) == [3100, 100, 100]
    # a lazy session of another head is not read by this pull
    other = host("h", partial=[partial(LINK1, "lazy", [0, 1, 2])])
    assert per_link(u.missing_for(other, 0)) == [4100, 600, 400]


def test_a_later_link_zeroing_a_chunk_makes_it_zero_in_the_head_image() -> None:
    zeroing = layer("zeroing", [(0, None, 0)], parent=BASE.digest)
    assert ChainUniverse([BASE, zeroing]).image()[:4] == (None, chunk("a1"), chunk("a2"), chunk("a3"))


HEAD = PlacementRequest("acme/py:head")


def _rank(hosts, request=HEAD, compat=None, ttl=300.0):
    u = universe()
    u.examine({FOREIGN.digest: FOREIGN})
    return rank_hosts(u, index_of(*hosts), request, NOW, ttl, compat or {})


def test_hosts_rank_by_missing_bytes_then_free_memory_then_load_then_name() -> None:
    facts = {
        "big": HostFacts(free_memory=64 << 30, load=0.5, vmms=(QEMU,)),
        "small": HostFacts(free_memory=4 << 30, load=0.1, vmms=(QEMU,)),
        "idle": HostFacts(free_memory=4 << 30, load=0.0, vmms=(QEMU,)),
        "quiet": HostFacts(vmms=(QEMU,)),
    }
    ranked, excluded = _rank(
        [
            host("holds-all", [BASE, LINK1, LINK2]),
            host("foreign", [FOREIGN]),
            *(host(name, [BASE], facts=f) for name, f in facts.items()),
            host("a-twin", [BASE], facts=facts["idle"]),
        ]
    )
    assert excluded == ()
    assert [(r.host, r.missing.total) for r in ranked] == [
        ("holds-all", 0),
        ("big", 1000),
        ("a-twin", 1000),
        ("idle", 1000),
        ("small", 1000),
        ("quiet", 1000),  # free memory not reported: last among equals
        ("foreign", 4300),
    ]
    assert [r.rank for r in ranked] == list(range(1, 8))


def test_exclusions_name_their_reason() -> None:
    old = host("silent", [BASE], reported_at=NOW - timedelta(seconds=301))
    firecracker = HostFacts(free_memory=8 << 30, vmms=(VmmFacts("firecracker", "1.7", "fc", "kvm", "x86_64", "host"),))
    ranked, excluded = _rank(
        [
            old,
            host("fc", [BASE], facts=firecracker),
            host("tiny-disk", facts=HostFacts(free_disk=65536, vmms=(QEMU,))),
            host("zone-b", [BASE], facts=HostFacts(labels={"zone": "b"}, vmms=(QEMU,))),
            host("ok", [BASE], facts=HostFacts(labels={"zone": "a"}, vmms=(QEMU,), download_rate=100)),
        ],
        PlacementRequest(
            "acme/py:head",
            hosts=("silent", "fc", "tiny-disk", "zone-b", "ok", "ghost"),
            constraints=Constraints(labels={"zone": "a"}),
        ),
        compat={"vmm": "qemu-microvm", "accel": "tcg", "memMiB": 256},
    )
    assert [(r.host, r.estimated_seconds) for r in ranked] == [("ok", 10.0)]
    assert {e.host: (e.kind, e.reason) for e in excluded} == {
        "fc": (
            "compat",
            "cannot restore it (vmm: snapshot 'qemu-microvm', host 'firecracker'; accel: snapshot 'tcg', host 'kvm')",
        ),
        "ghost": ("unknown", "no inventory: this host never reported"),
        "silent": ("expired", "last reported 301 s ago, over the 300 s TTL"),
        "tiny-disk": ("constraint", "label zone=(unset), not a"),
        "zone-b": ("constraint", "label zone=b, not a"),
    }


def test_capacity_counts_the_chunks_a_host_misses() -> None:
    request = PlacementRequest("acme/py:head", hosts=("tiny", "roomy"))
    ranked, excluded = _rank(
        [
            host("tiny", facts=HostFacts(free_disk=5 * 65536, vmms=(QEMU,))),
            host("roomy", facts=HostFacts(free_disk=6 * 65536, vmms=(QEMU,))),
        ],
        request,
    )
    assert [r.host for r in ranked] == ["roomy"]
    assert [(e.host, e.kind) for e in excluded] == [("tiny", "capacity")]
    assert "393,216 bytes its missing chunks take" in excluded[0].reason


def test_selector_and_limit() -> None:
    zone = {name: HostFacts(labels={"zone": z}, vmms=(QEMU,)) for name, z in (("a1", "a"), ("a2", "a"), ("b1", "b"))}
    hosts = [host(name, [BASE] if name == "a2" else [], facts=f) for name, f in zone.items()]
    ranked, excluded = _rank(hosts, PlacementRequest("acme/py:head", selector={"zone": "a"}, limit=1))
    assert [r.host for r in ranked] == ["a2"] and excluded == ()


@pytest.mark.parametrize(
    ("compat", "reason"),
    [
        ({}, None),
        ({"memMiB": 256, "vcpus": 2}, None),  # not what a host decides: its restore checks those
        ({"vmm": "qemu-microvm", "vmmVersion": "7.2.22", "arch": "x86_64", "cpu": "max"}, None),
        ({"vmmVersion": "8.0.0"}, "cannot restore it (vmmVersion: snapshot '8.0.0', host '7.2.22')"),
    ],
)
def test_compat_compares_what_a_host_decides(compat, reason) -> None:
    from hub_server.registry.fleet.hostcheck import compat_refusal

    assert compat_refusal(HostFacts(vmms=(QEMU,)), compat) == reason


def test_a_host_without_vmms_takes_only_snapshots_that_record_none() -> None:
    from hub_server.registry.fleet.hostcheck import compat_refusal

    assert compat_refusal(HostFacts(), {}) is None
    assert (
        compat_refusal(HostFacts(), {"vmm": "qemu-microvm"})
        == "reported no VMM, and the snapshot needs vmm 'qemu-microvm'"
    )


def test_a_universe_placed_again_sees_what_hosts_reported_since() -> None:
    """The compat verdict and the partial layers' relief are kept per host between placements: a new
    report with other facts or other bitmaps is read afresh, an unchanged one is not read again."""
    u = universe()
    compat = {"vmm": "qemu-microvm"}
    firecracker = HostFacts(vmms=(VmmFacts("firecracker", "1.9", "microvm", "kvm", "x86_64", "host"),))
    before = index_of(host("h", facts=firecracker), host("p", partial=[partial(LINK2, "lazy", [0])]))
    ranked, excluded = rank_hosts(u, before, HEAD, NOW, 300.0, compat)
    assert [e.host for e in excluded] == ["h"] and per_link(ranked[0].missing) == [3100, 600, 400]
    after = index_of(host("h", seq=2), host("p", seq=2, partial=[partial(LINK2, "lazy", [0, 1, 2, 6])]))
    ranked, excluded = rank_hosts(u, after, HEAD, NOW, 300.0, compat)
    assert excluded == () and {r.host: per_link(r.missing) for r in ranked} == {
        "p": [3100, 100, 100],
        "h": [4100, 600, 400],
    }
