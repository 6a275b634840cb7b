#!/usr/bin/env python3
"""A fleet simulation: placement by missing bytes against random placement and whole-image locality (issue 32).

Usage: python bench/placement_sim.py [--hosts 100] [--forks 2000] [--cache-gib 3] [--slots 4] [--busy 0.4]
                                     [--zipf 1.0] [--seeds 3]

The fleet: ``--hosts`` hosts, each with a layer cache of ``--cache-gib`` GiB (least recently used layers
out first; a layer a running fork uses stays; dropping a layer drops the layers above it) and ``--slots``
fork slots. The catalogue: 20 lineages on 4 bases (python, node, jvm, go: each a 1 MiB-chunked image
holding a shared Debian userland of 400 MiB and 300–600 MiB of its own), five lineages per base, each
``base ← libraries ← app`` and half of them ``← warmed``; the libraries link of two sibling lineages
shares a 200 MiB library set (``py-pandas`` and ``py-scipy`` share numpy), and every link brings its own
chunks (frames 30–90% of a chunk: compressed). ``--forks`` fork requests arrive one at a time, the
lineage drawn Zipf(``--zipf``)-popular; each fork runs for an exponentially distributed number of later
requests (mean ``hosts × slots × busy``: the fleet that busy on average, ``--busy``) and holds its slot
meanwhile.

Policies, each choosing among the hosts with a free slot:

- **missing bytes**: the hub's ranking (``hub_server/registry/fleet/ranking.py``'s ``ChainUniverse``: the
  chain's chunk-exact, dedup-aware missing bytes), then fewer running forks, then at random; with the
  hub's capacity rule (``hostcheck.capacity_refusal``): a host whose free cache (its free disk) cannot
  take the chunks it misses is excluded, unless every host is;
- **probe: least busy on a miss** (not the hub's policy; what a slot-aware scheduler on top of the ranking
  could do): a host holding the whole chain if one is free (the least busy of them), else the least busy
  host, then the fewest missing bytes;
- **random**;
- **image locality**: Kubernetes' ImageLocality score with the chain's head as the pod's one image
  (present only on a host holding the head whole): ``size × hosts holding it / hosts``, clamped to
  23–1000 MiB and scaled to 0–100; then fewer running forks, then at random.

Every policy's host then pulls the chain, moving what it misses by the same count (a pull reads locally
every chunk any snapshot on the host holds: ``forkd pull``'s local chunk index), and holds its links.
Printed per policy: bytes moved across the fleet, the share of forks that needed no download, and the
ratios. Goal: missing bytes moves ≥ 5× fewer bytes than random and ≥ 2× fewer than image locality.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import MACHINE_NOTE, GiB, MiB, human, print_table  # noqa: E402

from hub_server.registry.fleet.kube import score as kube_priority  # noqa: E402
from hub_server.registry.fleet.layerfacts import LayerFacts  # noqa: E402
from hub_server.registry.fleet.ranking import ChainUniverse  # noqa: E402

CHUNK = MiB
VMSTATE = 2 * MiB
BASES = ("python", "node", "jvm", "go")
PER_BASE = 5
#: ImageLocality's constants (kube-scheduler, plugins/imagelocality): 23 MB and 1000 MB per container, in MiB.
MIN_THRESHOLD = 23 * MiB
MAX_THRESHOLD = 1000 * MiB
MAX_NODE_SCORE = 100
#: The extender's weight in docs/placement.md's kube-scheduler configuration.
KUBE_WEIGHT = 5


@dataclass
class Catalogue:
    layers: dict[str, LayerFacts]
    disk: dict[str, int]
    """Layer → what it takes on a host's disk (its chunks, uncompressed)."""
    parent: dict[str, str | None]
    chains: list[list[str]]
    image_size: list[int]


def build_catalogue(rng: random.Random) -> Catalogue:
    counter = iter(range(1, 1 << 40))
    frames: dict[str, int] = {}

    def fresh(n: int) -> list[str]:
        out = [f"blake3:{next(counter):064x}" for _ in range(n)]
        for c in out:
            frames[c] = int(CHUNK * rng.uniform(0.3, 0.9))
        return out

    layers: dict[str, LayerFacts] = {}
    disk: dict[str, int] = {}
    parent: dict[str, str | None] = {}

    def add(name: str, below: str | None, chunks: list[str]) -> str:
        digest = f"sha256:{len(layers) + 1:064x}"
        layers[digest] = LayerFacts(digest, below, VMSTATE, {c: frames[c] for c in chunks}, chunk_size=CHUNK)
        disk[digest] = len(chunks) * CHUNK + VMSTATE
        parent[digest] = below
        return digest

    debian = fresh(400)
    chains: list[list[str]] = []
    for b, name in enumerate(BASES):
        base = add(name, None, debian + fresh(rng.randint(300, 600)))
        pools = [fresh(200), fresh(200), fresh(200)]
        for j in range(PER_BASE):
            libs = add(f"{name}-libs-{j}", base, pools[j // 2] + fresh(rng.randint(50, 150)))
            app = add(f"{name}-app-{j}", libs, fresh(rng.randint(30, 100)))
            chain = [base, libs, app]
            if (b + j) % 2:
                chain.append(add(f"{name}-warm-{j}", app, fresh(rng.randint(20, 60))))
            chains.append(chain)
    image_size = [sum(disk[d] for d in chain) for chain in chains]
    return Catalogue(layers, disk, parent, chains, image_size)


@dataclass
class Host:
    name: str
    cache: OrderedDict[str, int] = field(default_factory=OrderedDict)
    used: int = 0
    pins: dict[str, int] = field(default_factory=dict)
    running: int = 0

    def holds(self, digest: str) -> bool:
        return digest in self.cache

    def install(self, chain: list[str], cat: Catalogue, capacity: int) -> None:
        for digest in chain:  # base first: the head ends most recent
            if digest in self.cache:
                self.cache.move_to_end(digest)
            else:
                self.cache[digest] = cat.disk[digest]
                self.used += cat.disk[digest]
        for digest in list(self.cache):
            if self.used <= capacity:
                break
            if digest in self.cache and not self._pinned_above(digest, cat):
                self._drop(digest, cat)

    def _pinned_above(self, digest: str, cat: Catalogue) -> bool:
        return any(self.pins.get(d) for d in self._with_descendants(digest, cat))

    def _with_descendants(self, digest: str, cat: Catalogue) -> list[str]:
        out = [digest]
        for d in self.cache:
            p = cat.parent[d]
            while p is not None and p != digest:
                p = cat.parent[p]
            if p == digest:
                out.append(d)
        return out

    def _drop(self, digest: str, cat: Catalogue) -> None:
        for d in self._with_descendants(digest, cat):
            self.used -= self.cache.pop(d)


Policy = Callable[[list[Host], int, random.Random], Host]


class Fleet:
    def __init__(self, cat: Catalogue, hosts: int, capacity: int, slots: int) -> None:
        self.cat, self.capacity, self.slots = cat, capacity, slots
        self.hosts = [Host(f"h{i:03d}") for i in range(hosts)]
        self.universes = [ChainUniverse([cat.layers[d] for d in chain]) for chain in cat.chains]
        for u in self.universes:
            u.examine(cat.layers)

    def missing(self, host: Host, lineage: int) -> int:
        universe = self.universes[lineage]
        return universe.missing(universe.mask_of(host.cache)).total


def by_missing(fleet: Fleet) -> Policy:
    def choose(free: list[Host], lineage: int, rng: random.Random) -> Host:
        universe = fleet.universes[lineage]
        scored = [(universe.missing(universe.mask_of(h.cache)), h) for h in free]
        # the hub's capacity rule: a host whose free disk cannot take the chunks it misses is excluded
        roomy = [(m, h) for m, h in scored if max(0, fleet.capacity - h.used) >= m.chunks * CHUNK] or scored
        return min(roomy, key=lambda mh: (mh[0].total, mh[1].running, rng.random()))[1]

    return choose


def least_busy_on_a_miss(fleet: Fleet) -> Policy:
    """A probe, not the hub's policy: hosts holding the whole chain first (fewest running forks among them);
    when none does, the fewest running forks first and missing bytes only between equally busy hosts."""

    def choose(free: list[Host], lineage: int, rng: random.Random) -> Host:
        universe = fleet.universes[lineage]
        scored = [(universe.missing(universe.mask_of(h.cache)), h) for h in free]
        roomy = [(m, h) for m, h in scored if max(0, fleet.capacity - h.used) >= m.chunks * CHUNK] or scored
        holders = [(m, h) for m, h in roomy if m.total == 0]
        if holders:
            return min(holders, key=lambda mh: (mh[1].running, rng.random()))[1]
        return min(roomy, key=lambda mh: (mh[1].running, mh[0].total, rng.random()))[1]

    return choose


def via_kube_scheduler(fleet: Fleet) -> Policy:
    """kube-scheduler with the hub as its extender (docs/placement.md, "Kubernetes"): the extender's 0–10
    priority × its weight (5) × 10, plus NodeResourcesFit's LeastAllocated score (0–100, here free slots)."""

    def choose(free: list[Host], lineage: int, rng: random.Random) -> Host:
        universe = fleet.universes[lineage]

        def score(h: Host) -> int:
            m = universe.missing(universe.mask_of(h.cache))
            roomy = m.chunks == 0 or max(0, fleet.capacity - h.used) >= m.chunks * CHUNK  # filter: capacity
            extender = kube_priority(m.total, universe.total) if roomy else 0
            return extender * KUBE_WEIGHT * 10 + MAX_NODE_SCORE * (fleet.slots - h.running) // fleet.slots

        return max(free, key=lambda h: (score(h), rng.random()))

    return choose


def at_random(fleet: Fleet) -> Policy:
    return lambda free, lineage, rng: rng.choice(free)


def image_locality(fleet: Fleet) -> Policy:
    def choose(free: list[Host], lineage: int, rng: random.Random) -> Host:
        head = fleet.cat.chains[lineage][-1]
        size = fleet.cat.image_size[lineage]
        spread = sum(h.holds(head) for h in fleet.hosts) / len(fleet.hosts)
        scaled = int(size * spread)

        def score(h: Host) -> int:
            total = min(max(scaled if h.holds(head) else 0, MIN_THRESHOLD), MAX_THRESHOLD)
            return MAX_NODE_SCORE * (total - MIN_THRESHOLD) // (MAX_THRESHOLD - MIN_THRESHOLD)

        return min(free, key=lambda h: (-score(h), h.running, rng.random()))

    return choose


POLICIES: dict[str, Callable[[Fleet], Policy]] = {
    "missing bytes": by_missing,
    "missing bytes via kube-scheduler": via_kube_scheduler,
    "probe: least busy on a miss": least_busy_on_a_miss,
    "random": at_random,
    "image locality": image_locality,
}


def simulate(cat: Catalogue, args: argparse.Namespace, policy: str, seed: int) -> tuple[int, int]:
    """(bytes moved, forks that moved nothing) of one run."""
    rng = random.Random(seed)
    fleet = Fleet(cat, args.hosts, int(args.cache_gib * GiB), args.slots)
    choose = POLICIES[policy](fleet)
    weights = [1 / (k + 1) ** args.zipf for k in range(len(cat.chains))]
    order = list(range(len(cat.chains)))
    rng.shuffle(order)  # which lineage is popular does not follow the catalogue's order
    mean_life = args.hosts * args.slots * args.busy
    ending: list[tuple[int, Host, list[str]]] = []
    moved = zero = 0
    for t in range(args.forks):
        for end in [e for e in ending if e[0] <= t]:
            ending.remove(end)
            _, host, chain = end
            host.running -= 1
            for d in chain:
                host.pins[d] -= 1
        lineage = order[rng.choices(range(len(cat.chains)), weights)[0]]
        free = [h for h in fleet.hosts if h.running < args.slots]
        host = choose(free, lineage, rng)
        need = fleet.missing(host, lineage)
        moved += need
        zero += need == 0
        chain = cat.chains[lineage]
        for d in chain:
            host.pins[d] = host.pins.get(d, 0) + 1
        host.install(chain, cat, fleet.capacity)
        host.running += 1
        ending.append((t + 1 + math.ceil(rng.expovariate(1 / mean_life)), host, chain))
    return moved, zero


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=100, help="hosts in the fleet (100)")
    parser.add_argument("--forks", type=int, default=2000, help="fork requests (2000)")
    parser.add_argument("--cache-gib", type=float, default=3.0, help="each host's layer cache, GiB (3)")
    parser.add_argument("--slots", type=int, default=4, help="forks a host runs at once (4)")
    parser.add_argument(
        "--busy", type=float, default=0.4, help="the share of the fleet's slots forks hold on average (0.4)"
    )
    parser.add_argument("--zipf", type=float, default=1.0, help="the Zipf exponent of lineage popularity (1.0)")
    parser.add_argument("--seeds", type=int, default=3, help="runs, each with its own seed (3)")
    args = parser.parse_args()
    print(f"machine: {MACHINE_NOTE}")
    cat = build_catalogue(random.Random(0))
    distinct = {c for layer in cat.layers.values() for c in layer.frames}
    print(
        f"catalogue: {len(cat.chains)} lineages, {len(cat.layers)} layers, {sum(cat.disk.values()) / GiB:.1f} GiB "
        f"of layers on disk, {len(distinct) * CHUNK / GiB:.1f} GiB of distinct chunks; chains "
        f"{human(min(cat.image_size))}–{human(max(cat.image_size))}; {args.hosts} hosts × {args.cache_gib:g} GiB "
        f"cache, {args.slots} slots; {args.forks} forks, Zipf {args.zipf:g}"
    )
    results: dict[str, list[tuple[int, int]]] = {p: [] for p in POLICIES}
    for seed in range(1, args.seeds + 1):
        for policy in POLICIES:
            results[policy].append(simulate(cat, args, policy, seed))
    ours = statistics.mean(m for m, _ in results["missing bytes"])
    rows = []
    for policy, runs in results.items():
        moved = [m for m, _ in runs]
        zero = [z / args.forks for _, z in runs]
        rows.append(
            [
                policy,
                human(statistics.mean(moved)),
                f"{human(min(moved))}–{human(max(moved))}",
                f"{statistics.mean(zero):.1%}",
                f"{statistics.mean(moved) / ours:.2f}×" if ours else "n/a",
            ]
        )
    print_table(
        ["policy", "bytes moved (mean)", "range", "forks with no download", "bytes vs missing bytes"],
        rows,
        title=f"{args.forks} forks over {args.hosts} hosts, {args.seeds} seed(s)",
    )
    random_ratio = statistics.mean(m for m, _ in results["random"]) / ours if ours else math.inf
    locality_ratio = statistics.mean(m for m, _ in results["image locality"]) / ours if ours else math.inf
    met = random_ratio >= 5 and locality_ratio >= 2
    print(
        f"missing bytes moves {random_ratio:.1f}× fewer bytes than random (goal ≥ 5×) and {locality_ratio:.1f}× fewer "
        f"than image locality (goal ≥ 2×): {'met' if met else 'not met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
