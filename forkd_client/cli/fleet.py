"""The fleet commands (docs/placement.md): ``forkd node report``, ``forkd node serve``, ``forkd node status``
and ``forkd place``. What they run imports the hub client only when one of them runs.

The hub comes from ``--hub``, else ``FORKD_HUB_URL``, else the default login (``forkd place REF``: also the
reference's host); the token from ``FORKD_TOKEN`` or the stored login. A node reports with a ``node`` token
named like the host (``--host``, default: this machine's short host name).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from clikit.units import human_size, parse_size

from ..errors import UsageError
from .output import Context

__all__ = ["register"]

_LABEL = re.compile(r"([^=\s]+)=([^=\s]*)")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    node = sub.add_parser("node", parents=[common], help="report this host's inventory to a hub (fleet placement)")
    commands = node.add_subparsers(dest="node_command", metavar="COMMAND", required=True)

    reporting = argparse.ArgumentParser(add_help=False)
    reporting.add_argument(
        "--hub", metavar="HUB_URL", help="hub to report to (default: FORKD_HUB_URL or the last login)"
    )
    reporting.add_argument(
        "--host", metavar="NAME", help="this host's name, the node token's name (default: the short host name)"
    )
    reporting.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="a label placement can select on (repeatable)"
    )
    reporting.add_argument(
        "--download-rate",
        metavar="RATE",
        help="bytes per second this host pulls at (1GiB, 100MiB; default: what the last large pull measured)",
    )

    p = commands.add_parser("report", parents=[common, reporting], help="report once (for cron or a systemd timer)")
    p.add_argument("--full", action="store_true", help="send every layer, not only what changed since the last report")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=run_report)

    p = commands.add_parser("serve", parents=[common, reporting], help="report after every change and on a heartbeat")
    p.add_argument("--heartbeat", type=float, default=60.0, metavar="SECONDS", help="report at least this often (60)")
    p.add_argument("--poll", type=float, default=1.0, metavar="SECONDS", help="look for store changes this often (1)")
    p.add_argument(
        "--peer-listen",
        metavar="HOST:PORT",
        default=os.environ.get("FORKD_PEER_LISTEN") or None,
        help="also serve this store's verified chunks to fleet peers there (FORKD_PEER_LISTEN; default off)",
    )
    p.add_argument(
        "--peer-url", metavar="URL", help="the URL peers are told (default: http://HOST:PORT of the bound socket)"
    )
    p.add_argument(
        "--fleet-token-file",
        type=Path,
        metavar="FILE",
        help="the fleet token peers must present (default: FORKD_FLEET_TOKEN)",
    )
    p.set_defaults(func=run_serve)

    p = commands.add_parser("status", parents=[common], help="what the last report told which hub")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_status)

    p = sub.add_parser("place", parents=[common], help="rank a hub's fleet hosts by what they miss of a snapshot")
    p.add_argument("ref", metavar="REF", help="[HOST[:PORT]/]namespace/repo[:tag|@digest]")
    p.add_argument(
        "--hosts", metavar="H1,H2", help="candidate hosts, comma-separated (default: every host that reported)"
    )
    p.add_argument(
        "--selector", action="append", default=[], metavar="KEY=VALUE", help="consider only hosts with this label"
    )
    p.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="require this label (else excluded)"
    )
    p.add_argument("--min-free-memory", metavar="SIZE", help="require this much free memory (e.g. 4GiB)")
    p.add_argument("--min-free-disk", metavar="SIZE", help="require this much free disk (e.g. 20GiB)")
    p.add_argument("--arch", metavar="ARCH", help="require this architecture (e.g. x86_64)")
    p.add_argument("--vmm", metavar="VMM", help="require this VMM (qemu-microvm, firecracker)")
    p.add_argument("--limit", type=int, metavar="N", help="list at most N ranked hosts")
    p.add_argument("--json", action="store_true", help="print the hub's answer as JSON")
    p.set_defaults(func=run_place)


def _labels(items: list[str], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        match = _LABEL.fullmatch(item)
        if match is None:
            raise UsageError(f"{option} {item!r}: use KEY=VALUE")
        out[match.group(1)] = match.group(2)
    return out


def _size(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as e:
        raise UsageError(f"{option} {text!r}: {e}") from None


def _reporter(args: argparse.Namespace, ctx: Context, client: Any, store: Any, peer_url: str | None = None) -> Any:
    from ..node.report import Reporter

    host = args.host or socket.gethostname().split(".")[0]
    return Reporter(
        store,
        client,
        host,
        labels=_labels(args.label, "--label"),
        download_rate=_size(args.download_rate, "--download-rate"),
        peer_url=peer_url,
    )


def run_report(args: argparse.Namespace, ctx: Context) -> int:
    from .hub import _client

    labels_checked = _labels(args.label, "--label")  # usage errors before any request
    del labels_checked
    with ctx.store() as store, _client(None, args.hub, None if args.json else ctx) as client:
        outcome = _reporter(args, ctx, client, store).report(full=args.full)
    if args.json:
        ctx.json(outcome.to_obj())
        return 0
    from ..node.agent import describe

    ctx.print(describe(outcome))
    return 0


def run_serve(args: argparse.Namespace, ctx: Context) -> int:
    from ..node.agent import NodeAgent, ReportService
    from .hub import _client

    if args.heartbeat <= 0 or args.poll <= 0:
        raise UsageError("--heartbeat and --poll must be positive")
    _labels(args.label, "--label")

    def log(line: str) -> None:
        print(f"forkd node: {line}", file=ctx.stderr, flush=True)

    services: list[Any] = []
    peer_url = None
    if args.peer_listen:  # refused before anything else starts: no token, an address that cannot be bound
        from ..node.peers import PeerService, bind_listener, check_peer_url, fleet_token

        token = fleet_token(args.fleet_token_file)
        if args.peer_url is not None:
            check_peer_url(args.peer_url)
        sock = bind_listener(args.peer_listen)
    elif args.peer_url or args.fleet_token_file:
        raise UsageError("--peer-url and --fleet-token-file need --peer-listen HOST:PORT (or FORKD_PEER_LISTEN)")
    with ctx.store() as store, _client(None, args.hub, ctx) as client:
        if args.peer_listen:
            peers = PeerService(store.root, sock, token, log, url=args.peer_url)
            services.append(peers)
            peer_url = peers.url
        reporter = _reporter(args, ctx, client, store, peer_url)
        services.insert(0, ReportService(reporter, store, log, heartbeat=args.heartbeat, poll=args.poll))
        return NodeAgent(store, services, log).run()


def run_status(args: argparse.Namespace, ctx: Context) -> int:
    from ..node.state import read_state

    with ctx.store() as store:
        state = read_state(store)
        changes = store.changes()
    status = {
        "hub": state.get("hub"),
        "host": state.get("host"),
        "generation": state.get("generation"),
        "layers": len(state.get("layers") or []),
        "refused": sorted(state.get("refused") or {}),
        "reported_at": state.get("reported_at"),
        "store_changes": changes,
        "reported_changes": state.get("changes"),
        "up_to_date": state.get("changes") == changes,
        "peer_url": state.get("peer_url"),
    }
    if args.json:
        ctx.json(status)
        return 0
    if not state:
        ctx.print("no report yet (forkd node report, or forkd node serve)")
        return 0
    ctx.print(
        f"host {status['host']} → {status['hub']}: generation {status['generation']}, {status['layers']} layer(s)"
    )
    ctx.print("the store changed since the last report" if not status["up_to_date"] else "up to date with the store")
    if status["peer_url"]:
        ctx.print(f"serving chunks to fleet peers at {status['peer_url']}")
    return 0


def run_place(args: argparse.Namespace, ctx: Context) -> int:
    from ..hub.reference import Reference
    from .hub import _client

    ref = Reference.parse(args.ref)
    request: dict[str, Any] = {
        "reference": f"{ref.name}@{ref.digest}" if ref.digest else f"{ref.name}:{ref.tag or 'latest'}",
        "selector": _labels(args.selector, "--selector"),
        "constraints": {
            "minFreeMemory": _size(args.min_free_memory, "--min-free-memory"),
            "minFreeDisk": _size(args.min_free_disk, "--min-free-disk"),
            "arch": args.arch,
            "vmm": args.vmm,
            "labels": _labels(args.label, "--label"),
        },
    }
    if args.hosts:
        request["hosts"] = [h for h in args.hosts.split(",") if h]
    if args.limit is not None:
        if args.limit < 1:
            raise UsageError("--limit must be at least 1")
        request["limit"] = args.limit
    with _client(ref, ctx=None if args.json else ctx) as client:
        answer = client.placement(request)
    if args.json:
        ctx.json(answer)
        return 0
    _print_placement(ctx, answer)
    return 0


def _print_placement(ctx: Context, answer: dict[str, Any]) -> None:
    total = int(answer.get("totalBytes") or 0)
    ctx.print(
        f"{answer.get('reference')} → {answer.get('digest')}: {len(answer.get('chain') or [])} link(s), {human_size(total)}"
    )
    rows = []
    for host in answer.get("ranked") or []:
        missing = int(host.get("missingBytes") or 0)
        share = f"{100 * missing / total:.1f}%" if total else "0.0%"
        seconds = host.get("estimatedSeconds")
        links = " ".join(human_size(link.get("missingBytes", 0)) for link in host.get("links") or [])
        rows.append(
            [
                str(host.get("rank")),
                str(host.get("host")),
                human_size(missing),
                share,
                "-" if seconds is None else f"{seconds:,.1f} s",
                "-" if host.get("freeMemory") is None else human_size(host["freeMemory"]),
                links,
            ]
        )
    ctx.table(
        ["RANK", "HOST", "MISSING", "OF CHAIN", "EST. TIME", "FREE MEM", "PER LINK (BASE FIRST)"],
        rows,
        right=["RANK", "MISSING", "OF CHAIN", "EST. TIME", "FREE MEM"],
    )
    excluded = answer.get("excluded") or []
    if excluded:
        ctx.print()
        ctx.table(
            ["EXCLUDED", "WHY", "DETAIL"],
            [[str(e.get("host")), str(e.get("kind")), str(e.get("reason"))] for e in excluded],
        )
    if not rows and not excluded:
        print("no host has reported to this hub (run forkd node serve on the fleet's hosts)", file=sys.stderr)
