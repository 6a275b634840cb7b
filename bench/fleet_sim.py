#!/usr/bin/env python3
"""How a chain reaches 1,000 (and 2,600) hosts: hub only, regional mirrors, a peer swarm (issue 33).

Usage: python bench/fleet_sim.py [--hosts 1000,2600] [--size-gb 3] [--piece-mib 4] [--nic-gbit 10]
                                 [--upload-gbit G] [--efficiency 0.8] [--hub-gbit 25] [--mirrors 1]
                                 [--mirror-gbit 25] [--conns 4] [--policy rarest] [--tries 3]
                                 [--peers-serve pieces] [--slow-share 0] [--slow-gbit 1]
                                 [--modes a,b,c] [--seed 1] [--json]

A chunk-level, time-stepped model; nothing is tuned to a published figure. Every host starts at time 0
with nothing; a chain of ``--size-gb`` GB (10^9 bytes; 3 GB as in Kraken's published run) is cut into
``--piece-mib`` MiB pieces. A host downloads over ``--conns`` connections at once, each at an equal
share of its NIC (``--nic-gbit`` × ``--efficiency``): one step is the time one connection takes for one
piece, so a host receives at most ``--conns`` pieces a step. It uploads at ``--upload-gbit`` (default:
the NIC) × the efficiency, cut into slots of the same rate. ``--slow-share`` of the hosts (drawn with
the seed) have a ``--slow-gbit`` NIC both ways instead: a slot every few steps. The hub's (and a mirror's) egress limit is
cut the same way; a fractional slot carries into the next step. Modes:

- **a, hub only**: the hub serves every host, each an equal share (round robin, pieces in order).
- **b, mirrors**: ``--mirrors`` R mirrors (NIC and egress ``--mirror-gbit``) each fetch the chain from
  the hub in piece order (pull-through), sharing the hub's egress; the hosts are spread evenly over
  them and each host fetches, round robin at its mirror, the pieces its mirror already holds.
- **c, peer swarm**: every host serves the pieces it holds (a piece received in a step is served from the
  next), up to its upload slots. For each free connection a host draws a random host with a free
  upload slot, up to ``--tries`` times, and takes the piece it lacks that that host holds, chosen by
  ``--policy`` (``rarest``: fewest holders in the fleet, ties broken at random; ``random``); a
  connection that found no peer goes to the hub for the rarest piece it lacks, while the hub has a slot
  free that step. Finished hosts keep serving. ``--peers-serve whole``: a host serves only once it holds the
  whole chain (what a peer that serves only layers it holds whole does while everyone pulls at once).

Printed per mode and fleet size: p50/p99/max completion, the hub's egress as a multiple of the chain,
and Kraken's published figure for a 3 GB image to 2,600 hosts (p50 10 s, p99 18 s, every agent limited to
300 MB/s: ``--nic-gbit 2.4 --efficiency 1`` models that limit) beside it. What
is not modelled: latency and TCP ramp-up, disk and CPU (verification), per-request overheads, link
failures, heterogeneous hosts, a network core's limits (every host at full NIC rate at once).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, MiB, print_table  # noqa: E402

GB = 10**9
#: Kraken's published figure (github.com/uber/kraken, README, "Benchmark"): a 3 GB image of 2 layers to 2,600
#: hosts at once, every agent limited to 300 MB/s (so p50 10 s is "at speed limit"), 5 trackers, 5 origins.
KRAKEN = {"hosts": 2600, "size_gb": 3, "p50_s": 10.0, "p99_s": 18.0, "agent_limit_mb_s": 300}
MODES = {"a": "hub only", "b": "mirrors", "c": "peer swarm"}


@dataclass(frozen=True)
class Model:
    """The modelled fleet: sizes in bytes, rates in bytes per second (already × efficiency)."""

    hosts: int
    size: int
    piece: int
    download: float
    upload: float
    hub: float
    conns: int
    mirrors: int = 1
    mirror: float = 0.0
    policy: str = "rarest"
    tries: int = 3
    slow_share: float = 0.0
    slow: float = 0.0
    """A share of the hosts (drawn with the seed) whose NIC runs at ``slow`` bytes per second both ways."""
    whole: bool = False
    """Mode c: a host serves only once it holds the whole chain (a peer that serves whole layers only)."""

    @property
    def pieces(self) -> int:
        return math.ceil(self.size / self.piece)

    @property
    def step(self) -> float:
        """Seconds for one piece over one of a host's connections."""
        return self.piece * self.conns / self.download

    def slots(self, rate: float) -> float:
        """Pieces a server of ``rate`` bytes per second sends in one step."""
        return rate * self.step / self.piece

    def host_rates(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Each host's (download, upload) bytes per second: the slow share at ``slow``, the rest as set."""
        down = np.full(self.hosts, self.download)
        up = np.full(self.hosts, self.upload)
        slow = rng.permutation(self.hosts)[: round(self.hosts * self.slow_share)]
        down[slow] = np.minimum(down[slow], self.slow)
        up[slow] = np.minimum(up[slow], self.slow)
        return down, up


@dataclass
class Outcome:
    mode: str
    hosts: int
    p50_s: float
    p99_s: float
    max_s: float
    hub_egress: int
    """Bytes the hub sent (pieces × the chain's size ÷ its pieces)."""
    steps: int
    completed: int
    """Hosts that hold every piece at the end (all of them: each simulation runs until then)."""
    wall_s: float = 0.0

    def row(self, size: int) -> list[str]:
        return [
            f"{self.mode}: {MODES[self.mode]}",
            f"{self.hosts:,}",
            f"{self.p50_s:.1f}",
            f"{self.p99_s:.1f}",
            f"{self.max_s:.1f}",
            f"{self.hub_egress / size:.2f}x",
            f"{self.wall_s:.1f}",
        ]


class Credit:
    """A server's whole slots per step; the fraction carries over (unused whole slots do not)."""

    def __init__(self, per_step: float) -> None:
        self.per_step, self.frac = per_step, 0.0

    def take(self) -> int:
        total = self.per_step + self.frac
        whole = int(total)
        self.frac = total - whole
        return whole


class Credits:
    """:class:`Credit` for every host at once: a host on a slower link gets a slot every few steps."""

    def __init__(self, per_step: np.ndarray) -> None:
        self.per_step, self.frac = per_step, np.zeros_like(per_step)

    def take(self) -> np.ndarray:
        total = self.per_step + self.frac
        whole = np.floor(total)
        self.frac = total - whole
        return whole.astype(np.int64)


def _outcome(mode: str, m: Model, done_step: np.ndarray, hub_pieces: int, steps: int) -> Outcome:
    seconds = done_step * m.step
    return Outcome(
        mode,
        m.hosts,
        float(np.percentile(seconds, 50)),
        float(np.percentile(seconds, 99)),
        float(seconds.max()),
        hub_pieces * m.size // m.pieces,
        steps,
        int((done_step > 0).sum()),
    )


def _serve_round_robin(
    have: np.ndarray, limit: np.ndarray | int, slots: int, pointer: int, cap: int
) -> tuple[int, int]:
    """Give up to ``slots`` pieces to the hosts of ``have`` (pieces held, in order), each at most ``cap``
    and at most up to ``limit`` (what the server holds), an equal share, the remainder round robin
    from ``pointer``. Updates ``have``; returns (pieces sent, the next pointer)."""
    room = np.minimum(np.maximum(limit - have, 0), cap)
    want = np.flatnonzero(room)
    if slots <= 0 or want.size == 0:
        return 0, pointer
    grant = np.zeros_like(room)
    left = slots
    while left > 0 and want.size:
        share = left // want.size
        if share:
            give = np.minimum(room[want] - grant[want], share)
            grant[want] += give
            left -= int(give.sum())
        else:  # fewer slots than hosts: the next ``left`` hosts from the pointer
            order = np.roll(want, -int(np.searchsorted(want, pointer % have.size)))[:left]
            grant[order] += 1
            pointer = int(order[-1]) + 1
            left = 0
        want = want[grant[want] < room[want]]
    have += grant
    return int(grant.sum()), pointer


def simulate_hub(m: Model, rng: np.random.Generator) -> Outcome:
    """Mode a: every host fetches every piece from the hub, an equal share each."""
    have = np.zeros(m.hosts, dtype=np.int64)
    done = np.full(m.hosts, -1, dtype=np.int64)
    down = Credits(m.slots(m.host_rates(rng)[0]))
    hub, sent, pointer, step = Credit(m.slots(m.hub)), 0, 0, 0
    while (done < 0).any():
        step += 1
        n, pointer = _serve_round_robin(have, m.pieces, hub.take(), pointer, down.take())
        sent += n
        done[(done < 0) & (have >= m.pieces)] = step
    return _outcome("a", m, done, sent, step)


def simulate_mirrors(m: Model, rng: np.random.Generator) -> Outcome:
    """Mode b: R pull-through mirrors fetch from the hub in piece order; hosts fetch from their mirror."""
    r = max(1, m.mirrors)
    held = np.zeros(r, dtype=np.int64)  # pieces each mirror holds, in order
    groups = [np.arange(i, m.hosts, r) for i in range(r)]
    have = np.zeros(m.hosts, dtype=np.int64)
    done = np.full(m.hosts, -1, dtype=np.int64)
    down = Credits(m.slots(m.host_rates(rng)[0]))
    hub = Credit(m.slots(m.hub))
    egress = [Credit(m.slots(m.mirror)) for _ in range(r)]
    mirror_conns = max(1, int(m.slots(m.mirror)))  # a mirror's NIC, as many pieces a step as it can send
    pointers = [0] * r
    sent, hub_pointer, step = 0, 0, 0
    while (done < 0).any():
        step += 1
        mine = held.copy()  # what each mirror held when the step began
        n, hub_pointer = _serve_round_robin(held, m.pieces, hub.take(), hub_pointer, mirror_conns)
        sent += n
        cap = down.take()
        for i, group in enumerate(groups):
            sub = have[group]
            _, pointers[i] = _serve_round_robin(sub, int(mine[i]), egress[i].take(), pointers[i], cap[group])
            have[group] = sub
        done[(done < 0) & (have >= m.pieces)] = step
    return _outcome("b", m, done, sent, step)


def simulate_peers(m: Model, rng: np.random.Generator) -> Outcome:
    """Mode c: a swarm; the hub serves what no peer could (see the module docstring)."""
    n, p = m.hosts, m.pieces
    have = np.zeros((n, p), dtype=bool)  # what a host holds and serves: pieces received before this step
    held = np.zeros((n, p), dtype=bool)  # the same plus the pieces on their way this step
    count = np.zeros(p, dtype=np.int64)  # holders of each piece, in-flight ones included
    nhave = np.zeros(n, dtype=np.int64)
    done = np.full(n, -1, dtype=np.int64)
    down_rate, up_rate = m.host_rates(rng)
    down, up = Credits(m.slots(down_rate)), Credits(m.slots(up_rate))
    hub = Credit(m.slots(m.hub))
    sent, step = 0, 0
    rarest = m.policy == "rarest"

    def pick(dests: np.ndarray, useful: np.ndarray, perm: np.ndarray, offset: np.ndarray) -> np.ndarray:
        tie = (perm[None, :] + offset[dests][:, None]) % p
        key = np.where(useful, (count[None, :] * p if rarest else 0) + tie, np.iinfo(np.int64).max)
        return key.argmin(axis=1)

    while (done < 0).any():
        step += 1
        arriving: list[tuple[np.ndarray, np.ndarray]] = []
        cap = np.where(done >= 0 if m.whole else nhave > 0, up.take(), 0)
        hub_slots = hub.take()
        perm, offset = rng.permutation(p), rng.integers(0, p, size=n)
        need = np.where(done < 0, np.minimum(down.take(), p - nhave), 0)
        for slot in range(int(need.max())):
            pending = rng.permutation(np.flatnonzero(need > slot))
            for _ in range(m.tries):
                sources = np.flatnonzero(cap > 0)
                if pending.size == 0 or sources.size == 0:
                    break
                src = sources[rng.integers(0, sources.size, size=pending.size)]
                useful = have[src] & ~held[pending]
                ok = np.flatnonzero(useful.any(axis=1))
                if ok.size:  # each source serves at most its free slots: the first comers
                    order = ok[np.argsort(src[ok], kind="stable")]
                    s = src[order]
                    first = np.searchsorted(s, s)
                    kept = order[(np.arange(order.size) - first) < cap[s]]
                    chosen = pick(pending[kept], useful[kept], perm, offset)
                    held[pending[kept], chosen] = True
                    arriving.append((pending[kept], chosen))
                    np.subtract.at(cap, src[kept], 1)
                    np.add.at(count, chosen, 1)
                    matched = np.zeros(pending.size, dtype=bool)
                    matched[kept] = True
                    pending = pending[~matched]
            if pending.size and hub_slots > 0:
                served = pending[:hub_slots]
                chosen = pick(served, ~held[served], perm, offset)
                held[served, chosen] = True
                arriving.append((served, chosen))
                np.add.at(count, chosen, 1)
                hub_slots -= served.size
                sent += served.size
        for dests, pieces in arriving:
            have[dests, pieces] = True
            np.add.at(nhave, dests, 1)
        done[(done < 0) & (nhave >= p)] = step
    return _outcome("c", m, done, sent, step)


def simulate(mode: str, m: Model, seed: int) -> Outcome:
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    if mode == "a":
        out = simulate_hub(m, rng)
    elif mode == "b":
        out = simulate_mirrors(m, rng)
    else:
        out = simulate_peers(m, rng)
    out.wall_s = time.perf_counter() - started
    return out


def model_from(args: argparse.Namespace, hosts: int) -> Model:
    gbit = 1e9 / 8 * args.efficiency
    return Model(
        hosts=hosts,
        size=int(args.size_gb * GB),
        piece=int(args.piece_mib * MiB),
        download=args.nic_gbit * gbit,
        upload=(args.upload_gbit or args.nic_gbit) * gbit,
        hub=args.hub_gbit * gbit,
        conns=args.conns,
        mirrors=args.mirrors,
        mirror=args.mirror_gbit * gbit,
        policy=args.policy,
        tries=args.tries,
        slow_share=args.slow_share,
        slow=args.slow_gbit * gbit,
        whole=args.peers_serve == "whole",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="1000,2600", help="fleet sizes, comma-separated (default 1000,2600)")
    ap.add_argument("--size-gb", type=float, default=3.0, help="the chain's size in GB (10^9 bytes; default 3)")
    ap.add_argument("--piece-mib", type=float, default=4.0, help="piece (chunk) size in MiB (default 4)")
    ap.add_argument("--nic-gbit", type=float, default=10.0, help="each host's NIC in Gbit/s (default 10)")
    ap.add_argument("--upload-gbit", type=float, default=None, help="each host's upload in Gbit/s (default: the NIC)")
    ap.add_argument("--efficiency", type=float, default=0.8, help="share of a link's rate a transfer gets (0.8)")
    ap.add_argument("--hub-gbit", type=float, default=25.0, help="the hub's egress limit in Gbit/s (default 25)")
    ap.add_argument("--mirrors", type=int, default=1, help="mode b: regional mirrors (default 1)")
    ap.add_argument("--mirror-gbit", type=float, default=25.0, help="mode b: each mirror's NIC in Gbit/s (25)")
    ap.add_argument("--conns", type=int, default=4, help="a host's concurrent downloads and upload slots (4)")
    ap.add_argument("--policy", choices=("rarest", "random"), default="rarest", help="mode c: piece selection")
    ap.add_argument("--tries", type=int, default=3, help="mode c: random peers a connection tries before the hub")
    ap.add_argument(
        "--peers-serve",
        choices=("pieces", "whole"),
        default="pieces",
        help="mode c: a host serves every piece it holds, or only once it holds the whole chain (pieces)",
    )
    ap.add_argument("--slow-share", type=float, default=0.0, help="share of hosts on a slower NIC (default 0)")
    ap.add_argument("--slow-gbit", type=float, default=1.0, help="those hosts' NIC in Gbit/s, both ways (1)")
    ap.add_argument("--modes", default="a,b,c", help="comma-separated: a (hub), b (mirrors), c (peers)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (mode c); same seed, same result")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = ap.parse_args()
    modes = [x for x in args.modes.split(",") if x]
    if any(x not in MODES for x in modes):
        ap.error(f"--modes: choose from {','.join(MODES)}")
    rates = (args.nic_gbit, args.upload_gbit or args.nic_gbit, args.hub_gbit, args.mirror_gbit)
    if args.conns < 1 or args.tries < 0 or args.mirrors < 1 or min(args.size_gb, args.piece_mib, *rates) <= 0:
        ap.error("--conns and --mirrors must be >= 1, --tries >= 0, sizes and rates > 0")
    if not 0 < args.efficiency <= 1 or not 0 <= args.slow_share <= 1 or args.slow_gbit <= 0:
        ap.error("--efficiency must be in (0, 1], --slow-share in [0, 1], --slow-gbit > 0")

    outcomes = []
    for hosts in (int(h) for h in args.hosts.split(",")):
        m = model_from(args, hosts)
        outcomes += [simulate(mode, m, args.seed) for mode in modes]
    m = model_from(args, 0)
    if args.json:
        params = {k: v for k, v in asdict(m).items() if k != "hosts"}
        print(json.dumps({"model": params, "kraken": KRAKEN, "results": [asdict(o) for o in outcomes]}, indent=2))
        return
    print(
        f"fleet_sim: a {args.size_gb:g} GB chain in {args.piece_mib:g} MiB pieces ({m.pieces:,}); hosts' NIC "
        f"{args.nic_gbit:g} Gbit/s down, {args.upload_gbit or args.nic_gbit:g} up, at {args.efficiency:.0%}; "
        f"{args.conns} connections and upload slots a host"
        + (f" ({args.slow_share:.0%} of hosts at {args.slow_gbit:g} Gbit/s)" if args.slow_share else "")
        + f"; hub egress {args.hub_gbit:g} Gbit/s; "
        f"{args.mirrors} mirror(s) of {args.mirror_gbit:g} Gbit/s; peers: {args.policy} first, {args.tries} tries, serving {args.peers_serve}; "
        f"one step {m.step * 1000:.1f} ms; seed {args.seed}"
    )
    rows = [o.row(m.size) for o in outcomes]
    rows.append(
        [
            f"Kraken, published ({KRAKEN['size_gb']} GB, agents at {KRAKEN['agent_limit_mb_s']} MB/s)",
            f"{KRAKEN['hosts']:,}",
            f"{KRAKEN['p50_s']:.1f}",
            f"{KRAKEN['p99_s']:.1f}",
            "",
            "",
            "",
        ]
    )
    print_table(["mode", "hosts", "p50 (s)", "p99 (s)", "max (s)", "hub egress / chain", "sim wall (s)"], rows)
    print(
        "a model, not a measurement: no latency, TCP ramp-up, disk, CPU or core-network limits; "
        f"the simulation ran on {MACHINE_NOTE}"
    )


if __name__ == "__main__":
    main()
