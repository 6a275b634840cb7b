"""``forkd-hub verify``: re-hash stored objects and check the database against the store (``registry/upkeep/scrub.py``).

Output: one line per problem on stdout (kind, key, reason, action), then a summary with sizes in
IEC units; ``--json`` prints the report (``ScrubReport.to_json``) instead. ``--quarantine`` moves
what is wrong aside and marks it (never deletes); ``--clear-marks`` forgets every damage mark after
a repair (a forkd pack marked damaged is then built again on its next request).

Exit status: 0 everything verified, 3 problems found (reported, or quarantined with
``--quarantine``), 1 the check could not run (no hub there, storage or database unreachable), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys

from clikit.units import human_size
from hub_server.cli_common import add_store_args, run_on_hub
from hub_server.compose import HubServices
from hub_server.registry.content.damage import clear_marks
from hub_server.registry.upkeep.scrub import Scrubber, ScrubReport
from hub_server.settings import parse_duration

__all__ = ["PROBLEMS_FOUND", "register"]

#: The exit status when something is wrong (0: all verified; 1: could not run; 2: usage).
PROBLEMS_FOUND = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    verify = subparsers.add_parser("verify", help="re-hash stored objects, check the database against the store")
    add_store_args(verify)
    verify.add_argument(
        "--quarantine",
        action="store_true",
        help="move damaged and orphan objects to quarantine/ and mark them (nothing is deleted)",
    )
    verify.add_argument(
        "--grace", default="1h", help="objects without a row younger than this are not orphans yet (default 1h)"
    )
    verify.add_argument(
        "--clear-marks", action="store_true", help="forget every damage mark (after a repair), then verify"
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> int:
    try:
        grace = parse_duration(args.grace)
    except ValueError as e:
        print(f"forkd-hub: error: {e}", file=sys.stderr)
        return 1

    async def scrub(hub: HubServices) -> int:
        cleared = await clear_marks(hub.registry.ctx) if args.clear_marks else 0
        report = await Scrubber(hub.registry.ctx, quarantine=args.quarantine, grace=grace).run()
        if args.json:
            print(json.dumps({**report.to_json(), "marksCleared": cleared}, indent=2))
        else:
            _print(report, cleared)
        return 0 if report.clean else PROBLEMS_FOUND

    return run_on_hub(args, scrub, create=False)


def _print(report: ScrubReport, cleared: int) -> None:
    if cleared:
        print(f"forgot {cleared} damage mark(s)")
    for p in report.problems:
        where = f" -> {p.moved_to}" if p.moved_to else ""
        print(f"{p.kind:8} {p.key}: {p.reason} [{p.action}{where}]")
    print(
        f"checked {report.blobs} blob(s), {report.recipes} recipe(s), {report.packs} pack(s) holding "
        f"{report.frames} frame(s): {human_size(report.bytes_hashed)} hashed; "
        + ("everything verified" if report.clean else f"{len(report.problems)} problem(s)")
    )
