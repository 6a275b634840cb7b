#!/usr/bin/env python3
"""16 hosts pull the same chain at once: from the hub, through one mirror, with peers (issue 33).

Usage: python bench/fleet_pull.py [--hosts 16] [--mib 512] [--child-dirty 0.05] [--modes a,b,c] [--seeds 0]
                                  [--dir DIR] [--json] [--quick]

A two-link chain (a base whose ``memory.bin`` is ``--mib`` MiB of data, every 4 MiB block written,
alternately random and text-like bytes, zstd ratio ~1.8: bench/images.py; and a child with
``--child-dirty`` of it rewritten) is pushed once to a ``forkd-hub serve`` (filesystem store, rate limits
off) through a byte-counting TCP proxy (bench/proxy.py): the bytes pushed are **one chain's bytes**.
Every later request to the hub (clients, the mirror, node agents, peer look-ups) goes through the same
proxy; its hub → client bytes are the **hub egress** of a mode.

``--hosts`` hosts, each its own store (FORKD_HOME) and config dir, then start ``forkd pull --json`` at
the same moment; timed: until each has the chain (per-host p50 and max) and until all have it. Modes:

- **a**: every host pulls from the hub (through the proxy).
- **b**: one mirror, ``forkd-hub serve --mirror-of HUB`` (its own data dir, rate limits off), whose
  upstream is the proxy; the hosts pull with ``FORKD_HUB_MIRRORS="HUB=MIRROR"``. A second counting proxy in
  front of the mirror gives the mirror's egress.
- **c**: every host runs ``forkd node serve --peer-listen 127.0.0.1:PORT`` (a node token named like the
  host, FORKD_FLEET_TOKEN) before the pulls start, and pulls with ``FORKD_PEERS=1``. ``--seeds K`` first
  has K more hosts pull the chain from the hub, serve it as peers and report it (their hub egress is
  printed apart; the goal counts it), then the hosts pull. The peer design serves only layers a host
  holds whole and reported, and a pull asks the hub which peers hold them when it starts: when every host
  starts at once, none does yet and every chunk comes from the hub (bench/fleet_sim.py
  ``--peers-serve whole`` models it at scale); ``--seeds`` shows the peer path.

Modes b and c need the mirror and the peers (issue 33): on a tree without them each is skipped, saying
which flag is missing (read from ``forkd-hub serve --help``, ``forkd node serve --help`` and
``forkd pull --help``). Every host's
pulled ``memory.bin`` of the head is compared with the source. Goals: hub egress ≤ 1.5× one chain's
bytes in b and c (a: hosts × the chain), time until all hosts have it no worse than a's. The proxies
run in this process and cost CPU in every mode alike. Scratch data: the source images, the hub, and
one mode's stores at a time (about (14 + 2 × hosts) × --mib); free space is checked first. ``--quick``: 3 hosts,
8 MiB, mode a (a smoke run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, MiB, human, print_table  # noqa: E402
from images import make_child_image, make_memory_image, make_vmstate  # noqa: E402
from oci import sha256_file  # noqa: E402
from procs import (  # noqa: E402
    ForkdUser,
    HubServer,
    forkd_cmd,
    forkd_hub_cmd,
    free_port,
    log_summary,
    stop_process,
)
from proxy import CountingProxy  # noqa: E402

from tests.services.readiness import wait_ready  # noqa: E402

REF = "acme/fleet:v1"
FLEET_TOKEN = "fleet-bench-token-0123456789abcdef"
MODES = {"a": "all from the hub", "b": "through one mirror", "c": "with peers"}


@dataclass
class ModeResult:
    mode: str
    hosts: int
    all_s: float = 0.0
    p50_s: float = 0.0
    max_s: float = 0.0
    hub_egress: int = 0
    seed_egress: int = 0
    mirror_egress: int | None = None
    identical: int = 0
    bytes_by_source: dict[str, int] = field(default_factory=dict)
    peers_dropped: dict[str, int] = field(default_factory=dict)
    """Why pulls dropped a peer (``pull --json``'s ``peers_dropped``) → how many pulls did so."""
    swarm_sizes: dict[int, int] = field(default_factory=dict)
    """The largest swarm each pull saw (``pull --json``'s ``swarm_size``) → how many pulls saw it."""
    skipped: str | None = None
    logs: str = ""


def help_of(*cmd: str) -> str:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def missing_feature(mode: str) -> str | None:
    """Why ``mode`` cannot run in this tree, or None."""
    if mode == "b" and "--mirror-of" not in help_of(*forkd_hub_cmd("serve", "--help")):
        return "mode b needs `forkd-hub serve --mirror-of` (not in this tree)"
    if mode == "c":
        if "--peer-listen" not in help_of(*forkd_cmd("node", "serve", "--help")):
            return "mode c needs `forkd node serve --peer-listen` (not in this tree)"
        if "--peers" not in help_of(*forkd_cmd("pull", "--help")):
            return "mode c needs `forkd pull --peers` (not in this tree)"
    return None


def check_space(path: Path, need: int) -> None:
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise SystemExit(
            f"fleet_pull: {human(free)} free under {path}, this run needs about {human(need)}: "
            "use a smaller --mib or --hosts, or --dir on a larger filesystem"
        )


def make_chain(src: Path, mib: int, dirty: float) -> list[Path]:
    """Two links: a base of ``mib`` MiB of data (every block written) and a child with ``dirty`` of it changed."""
    base, child = src / "base", src / "child"
    base.mkdir(parents=True)
    child.mkdir()
    make_memory_image(base / "memory.bin", mib * MiB, mib * MiB, seed=33)
    make_vmstate(base / "vmstate", seed=33)
    make_child_image(base / "memory.bin", child / "memory.bin", dirty, seed=34)
    make_vmstate(child / "vmstate", seed=34)
    return [base, child]


class Fleet:
    """``n`` hosts named ``prefix00``…, each a :class:`ForkdUser` under ``root`` pointed at ``hub_url``."""

    def __init__(self, root: Path, hub_url: str, n: int, prefix: str = "h", env: dict[str, str] | None = None):
        self.users = [ForkdUser(root / f"{prefix}{i:02d}", hub_url) for i in range(n)]
        self.names = [f"{prefix}{i:02d}" for i in range(n)]
        for user, name in zip(self.users, self.names, strict=True):
            user.env.update(env or {})
            user.env["FORKD_PEERS_HOST"] = name  # the name its agent reports: the swarm's member name
        self.agents: list[tuple[subprocess.Popen, Path]] = []

    def pull_all(self) -> tuple[float, list[float], list[dict]]:
        """Start every host's ``forkd pull --json`` at once: (seconds until all finished, each host's
        seconds, each report). Their output goes to files (a pipe nobody reads while they run could fill
        and stall them). A failed pull raises RuntimeError with its stderr."""
        outs = []
        for user in self.users:
            user.root.mkdir(parents=True, exist_ok=True)
            outs.append((user.root / "pull.json", user.root / "pull.err"))
        start = time.perf_counter()
        procs = []
        for user, (out, err) in zip(self.users, outs, strict=True):
            with out.open("wb") as stdout, err.open("wb") as stderr:
                procs.append(
                    subprocess.Popen(
                        forkd_cmd("pull", REF, "--as", "head", "--json"), env=user.env, stdout=stdout, stderr=stderr
                    )
                )
        done: dict[int, float] = {}
        while len(done) < len(procs):
            for i, p in enumerate(procs):
                if i not in done and p.poll() is not None:
                    done[i] = time.perf_counter() - start
            time.sleep(0.01)
        reports = []
        for name, p, (out, err) in zip(self.names, procs, outs, strict=True):
            if p.returncode != 0:
                why = err.read_text(errors="replace").strip()[-2000:]
                raise RuntimeError(f"host {name}: forkd pull failed ({p.returncode}): {why}")
            reports.append(json.loads(out.read_text()))
        times = [done[i] for i in range(len(procs))]
        return max(times), times, reports

    def start_agents(self, hub: HubServer, hub_url: str) -> None:
        """A peer-serving node agent per host (a node token named like it), each listening when this returns."""
        tokens = node_tokens(hub, self.names)
        ports = []
        for user, name in zip(self.users, self.names, strict=True):
            ports.append(free_port())
            log = user.root / "agent.log"
            user.root.mkdir(parents=True, exist_ok=True)
            listen = f"127.0.0.1:{ports[-1]}"
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    forkd_cmd(
                        "node", "serve", "--hub", hub_url, "--host", name, "--peer-listen", listen, "--poll", "0.2"
                    ),
                    env={**user.env, "FORKD_TOKEN": tokens[name], "FORKD_FLEET_TOKEN": FLEET_TOKEN},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.agents.append((proc, log))
        for name, port, (proc, log) in zip(self.names, ports, self.agents, strict=True):
            wait_ready(lambda p=port: _listens(p), what=f"the node agent of {name}", proc=proc, log=log)

    def wait_reported(self) -> None:
        for user, name, (proc, log) in zip(self.users, self.names, self.agents, strict=True):
            wait_ready(lambda u=user, n=name: _reported(u.home, n), what=f"{name}'s report", proc=proc, log=log)

    def stop_agents(self) -> None:
        for proc, _ in self.agents:
            stop_process(proc)
        self.agents = []

    def identical(self, expected: str) -> int:
        return sum(sha256_file(u.home / "snapshots" / "head" / "memory.bin") == expected for u in self.users)

    def remove(self) -> None:
        self.stop_agents()
        for user in self.users:
            shutil.rmtree(user.root, ignore_errors=True)


def node_tokens(hub: HubServer, names: list[str], at_once: int = 4) -> dict[str, str]:
    """A node token named like each host (``forkd-hub token create``, ``at_once`` processes at a time)."""
    tokens: dict[str, str] = {}
    for i in range(0, len(names), at_once):
        batch = {
            name: subprocess.Popen(
                forkd_hub_cmd("token", "create", name, "--data-dir", str(hub.data_dir), "--scope", "node:acme/*"),
                env=hub.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in names[i : i + at_once]
        }
        for name, proc in batch.items():
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"forkd-hub token create {name} failed ({proc.returncode}): {err.strip()}")
            tokens[name] = out.strip()
    return tokens


def _listens(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _reported(home: Path, name: str) -> bool:
    """Whether the host's node agent reported the store as it is now (tests/e2e/test_fleet_placement.py)."""
    try:
        state = json.loads((home / "node" / "state.json").read_text())
        changes = int((home / ".changes").read_text() or 0) if (home / ".changes").exists() else 0
    except (OSError, ValueError):
        return False
    return state.get("changes") == changes and state.get("host") == name


def sum_sources(reports: list[dict]) -> dict[str, int]:
    total: dict[str, int] = {}
    for report in reports:
        for source, n in (report.get("bytes_by_source") or {}).items():
            total[source] = total.get(source, 0) + int(n)
    return total


def run_mode(
    mode: str, root: Path, hub: HubServer, proxy: CountingProxy, args: argparse.Namespace, sha: str
) -> ModeResult:
    result = ModeResult(mode, args.hosts)
    work = root / f"mode-{mode}"
    work.mkdir()
    extra: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        mirror_proxy = None
        if mode == "b":
            log = work / "mirror.log"
            mirror = stack.enter_context(mirror_server(work / "mirror", log, proxy.url))
            mirror_proxy = stack.enter_context(CountingProxy(mirror.port))
            extra["FORKD_HUB_MIRRORS"] = f"{proxy.url}={mirror_proxy.url}"
        if mode == "c":
            extra.update({"FORKD_PEERS": "1", "FORKD_FLEET_TOKEN": FLEET_TOKEN})
            if args.seeds:
                seeds = Fleet(work / "seeds", proxy.url, args.seeds, prefix="seed", env=extra)
                stack.callback(seeds.remove)
                before = proxy.down
                seeds.pull_all()
                seeds.start_agents(hub, proxy.url)
                seeds.wait_reported()
                result.seed_egress = proxy.down - before
        fleet = Fleet(work, proxy.url, args.hosts, env=extra)
        stack.callback(fleet.remove)
        if mode == "c":
            fleet.start_agents(hub, proxy.url)
        # the proxies count a byte before they pass it on: once the pulls exited, every byte they took was
        # counted (the agents' reports and the mirror's upstream reads meanwhile count too: they are the mode's)
        before = proxy.down
        result.all_s, times, reports = fleet.pull_all()
        result.hub_egress = proxy.down - before
        if mirror_proxy is not None:
            result.mirror_egress = mirror_proxy.down
        result.p50_s, result.max_s = statistics.median(times), max(times)
        result.bytes_by_source = sum_sources(reports)
        for report in reports:
            size = int(report.get("swarm_size") or 0)
            result.swarm_sizes[size] = result.swarm_sizes.get(size, 0) + 1
            for why in (report.get("peers_dropped") or {}).values():
                result.peers_dropped[str(why)[:200]] = result.peers_dropped.get(str(why)[:200], 0) + 1
        result.identical = fleet.identical(sha)
    if mode == "b":
        result.logs = log_summary(mirror=work / "mirror.log")
    shutil.rmtree(work, ignore_errors=True)
    return result


def mirror_server(data_dir: Path, log_path: Path, upstream: str) -> HubServer:
    """``forkd-hub serve --mirror-of UPSTREAM`` on a free port (rate limits off), its own data dir."""
    return HubServer(data_dir, log_path, serve_args=("--mirror-of", upstream))


def bench(args: argparse.Namespace, root: Path) -> dict:
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"fleet_pull: unknown mode(s) {','.join(unknown)}: choose from {','.join(MODES)}")
    # the source images and the pusher's store (2 × mib each, removed after the push), the hub's store (~4.5 ×
    # mib: 145 MiB for 32), a mirror's copy, one mode's stores (two memory.bin files a host: the base and the
    # child) and its seeds', 10% slack
    need = int((4 + 5 + 5 + 2 * (args.hosts + args.seeds)) * args.mib * MiB * 1.1)
    check_space(root, need)
    srcs = make_chain(root / "src", args.mib, args.child_dirty)
    sha = sha256_file(srcs[-1] / "memory.bin")
    data_bytes = (srcs[0] / "memory.bin").stat().st_blocks * 512
    hub_log = root / "hub.log"
    out: dict = {"hosts": args.hosts, "mib": args.mib, "seeds": args.seeds, "modes": {}}
    hub_env = {"FORKD_HUB_SWARM_WINDOW": str(args.swarm_window)}
    with HubServer(root / "hub", hub_log, hub_env) as hub, CountingProxy(hub.port) as proxy:
        pusher = ForkdUser(root / "pusher", proxy.url, hub.token("pusher", "push:acme/*"))
        pusher.run("import", str(srcs[0]), "base")
        pusher.run("import", str(srcs[1]), "child", "--parent", "base")
        proxy.reset()
        pusher.run("push", "child", REF, "--public")
        out["chain_bytes"] = proxy.reset()[0]
        out["chain_data_bytes"] = data_bytes
        shutil.rmtree(pusher.root)
        shutil.rmtree(root / "src")
        for mode in modes:
            why = missing_feature(mode)
            if why:
                out["modes"][mode] = asdict(ModeResult(mode, args.hosts, skipped=why))
                continue
            out["modes"][mode] = asdict(run_mode(mode, root, hub, proxy, args, sha))
    out["hub_log"] = log_summary(hub=hub_log)
    return out


def print_results(out: dict) -> None:
    chain = out["chain_bytes"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"fleet_pull: {out['hosts']} hosts pull {REF} at once (2 links: a base of {human(out['chain_data_bytes'])} of data "
        f"and a child; one chain = {human(chain)} pushed); load average {load}; {MACHINE_NOTE}"
    )
    a = out["modes"].get("a")
    rows = []
    for mode, r in out["modes"].items():
        name = f"{mode}: {MODES[mode]}" + (f" ({out['seeds']} seeds)" if mode == "c" and out["seeds"] else "")
        if r["skipped"]:
            rows.append([name, "skipped", "", "", "", "", "", "", ""])
            continue
        vs_a = f"{r['all_s'] / a['all_s']:.2f}x" if a and not a["skipped"] else ""
        rows.append(
            [
                name,
                f"{r['all_s']:.1f}",
                f"{r['p50_s']:.1f}",
                f"{r['max_s']:.1f}",
                vs_a,
                human(r["hub_egress"]),
                human(r["seed_egress"]) if r["seed_egress"] else "",
                f"{(r['hub_egress'] + r['seed_egress']) / chain:.2f}x",
                f"{r['identical']}/{r['hosts']}",
            ]
        )
    print_table(
        [
            "mode",
            "all (s)",
            "p50 (s)",
            "max (s)",
            "all vs a",
            "hub egress",
            "seeds' egress",
            "egress / chain",
            "identical",
        ],
        rows,
    )
    print(
        "egress / chain: the hub's egress while the hosts pulled plus the seeds' pulls, over the bytes one push "
        "sent; goals: <= 1.50x in b and c, and the time until all have it no worse than a's (all vs a <= 1.00x)"
    )
    for mode, r in out["modes"].items():
        if r["skipped"]:
            print(f"{mode}: {r['skipped']}")
        else:
            extra = f"; mirror egress {human(r['mirror_egress'])}" if r["mirror_egress"] is not None else ""
            if r["peers_dropped"]:
                extra += f"; peers dropped by pulls: {r['peers_dropped']}"
            if mode == "c" and r["swarm_sizes"]:
                extra += f"; swarm size seen -> pulls: {dict(sorted(r['swarm_sizes'].items()))}"
            print(
                f"{mode}: bytes by source (all hosts) {r['bytes_by_source'] or 'not reported'}{extra}{'; ' + r['logs'] if r['logs'] else ''}"
            )
    print(out["hub_log"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=16, help="hosts pulling at once (default 16)")
    ap.add_argument("--mib", type=int, default=512, help="MiB of data in the base's memory.bin (default 512)")
    ap.add_argument("--child-dirty", type=float, default=0.05, help="share of the base the child rewrites (0.05)")
    ap.add_argument("--modes", default="a,b,c", help="comma-separated: a (hub), b (mirror), c (peers)")
    ap.add_argument(
        "--swarm-window",
        type=float,
        default=2.0,
        help="mode c: the hub's cohort window in seconds (FORKD_HUB_SWARM_WINDOW): pulls asking within it form one "
        "swarm; 16 processes starting at once on 2 loaded cores take more than the hub's default 1 s (default 2)",
    )
    ap.add_argument("--seeds", type=int, default=0, help="mode c: hosts that pull and serve before the others")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 hosts, 8 MiB, mode a")
    args = ap.parse_args()
    if args.quick:
        args.hosts, args.mib, args.modes = 3, 8, "a"
    if args.hosts < 1 or args.mib < 4 or args.mib % 4 or args.seeds < 0 or not 0 < args.child_dirty < 1:
        ap.error("--hosts must be >= 1, --mib a multiple of 4 (4 MiB blocks), --seeds >= 0, --child-dirty in (0, 1)")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="fleet-pull-") as tmp:
        out = bench(args, Path(tmp))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_results(out)


if __name__ == "__main__":
    main()
