"""``forkd-hub token …`` and ``forkd-hub audit``: token management and the audit trail.

``hub_server/cli.py`` calls :func:`register` on its sub-parser set; every command sets
``args.func(args) -> int`` (the exit status). Each command builds its settings like ``serve``
(``--data-dir``, ``--database-url``, ``--storage`` or their ``FORKD_HUB_*`` variables), enters
``compose.open_hub`` (which checks, and for SQLite upgrades, the schema) and runs once under
``asyncio.run``.

``token create`` prints only the token on stdout (``TOKEN=$(forkd-hub token create …)``);
everything else goes to stderr. Creating and revoking tokens are audited with the actor
``cli:<login user>``, in the database and in ``<data dir>/audit.jsonl`` when that directory exists (with
PostgreSQL and S3 a host needs no data directory to run these commands).
Exit status: 0 success, 1 a rejected request (bad scope, duplicate name, …), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from hub_server import cli_common
from hub_server.audit import AuditChainBroken, AuditLog, export_events
from hub_server.audit_anchor import parse_head, verify_trail
from hub_server.auth.models import utcnow
from hub_server.auth.tokens import TokenInfo, TokenService, parse_duration
from hub_server.cli_common import STORE_FLAGS, add_store_args, cli_actor, run_on_hub
from hub_server.settings import DEFAULT_DATA_DIR

# add_store_args, cli_actor, STORE_FLAGS: re-exported from cli_common for the callers that import them from here
__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_EXPIRY",
    "STORE_FLAGS",
    "add_store_args",
    "cli_actor",
    "main_for_tests",
    "register",
]

#: Tokens expire unless asked not to (``--expires never``).
DEFAULT_EXPIRY = "90d"

Command = Callable[[TokenService, AuditLog, argparse.Namespace], Awaitable[int]]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``token`` (create, list, revoke) and ``audit`` commands."""
    token = subparsers.add_parser("token", help="create, list and revoke API tokens")
    commands = token.add_subparsers(dest="token_command", metavar="COMMAND", required=True)

    create = commands.add_parser("create", help="create a token and print it (only the token, on stdout)")
    create.add_argument("name", help="a unique name, [A-Za-z0-9_.-]{1,64}")
    create.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        required=True,
        metavar="SCOPE",
        help="pull:PATTERN, push:PATTERN, delete:PATTERN, node:PATTERN (a fleet host: reports its inventory and "
        "asks for placements, reads no content; name the token after the host) or admin (repeatable); "
        "PATTERN globs ns/repo",
    )
    create.add_argument(
        "--expires", default=DEFAULT_EXPIRY, help=f"30d, 12h, 90m, 3600s or never (default {DEFAULT_EXPIRY})"
    )
    add_store_args(create)
    create.set_defaults(func=lambda args: _run(args, _create))

    listing = commands.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    add_store_args(listing)
    listing.set_defaults(func=lambda args: _run(args, _list))

    revoke = commands.add_parser("revoke", help="revoke a token by name")
    revoke.add_argument("name")
    add_store_args(revoke)
    revoke.set_defaults(func=lambda args: _run(args, _revoke))

    audit = subparsers.add_parser("audit", help="show the audit log, newest first")
    audit.add_argument("--action", help="only this action (push, tag, delete, token.create, …)")
    audit.add_argument("--repository", help="only this repository (ns/repo)")
    audit.add_argument("--actor", help="only this actor (a token name, anonymous, cli:USER)")
    audit.add_argument("--since", help="only the last 24h, 7d, …")
    audit.add_argument("--limit", type=int, default=100, help="at most N events (default 100)")
    audit.add_argument("--json", action="store_true", help="print a JSON array")
    audit.add_argument(
        "--verify",
        action="store_true",
        help="check the audit trail instead: the database's hash chain (every replica's events), the local JSONL "
        "export against it (brought up to date), and print the head (COUNT:SHA256) to publish",
    )
    audit.add_argument(
        "--export",
        metavar="FILE",
        type=Path,
        help="write the whole trail to FILE as a JSONL export (or bring FILE up to date), from the database",
    )
    audit.add_argument(
        "--expect-head",
        metavar="COUNT:SHA256",
        type=parse_head,
        help="with --verify: also check that line COUNT is the head published earlier",
    )
    add_store_args(audit)
    audit.set_defaults(func=lambda args: _run(args, _audit))


def main_for_tests(argv: Sequence[str]) -> int:
    """Parse ``argv`` with a parser holding only these commands and run it; return the status."""
    return cli_common.main_for_tests(register, argv)


def _run(args: argparse.Namespace, command: Command) -> int:
    return run_on_hub(args, lambda hub: command(hub.tokens, hub.audit, args), create=False)  # never creates a hub


async def _create(tokens: TokenService, audit: AuditLog, args: argparse.Namespace) -> int:
    expires_in = parse_duration(args.expires)
    secret = await tokens.create(args.name, args.scopes, expires_in)
    info = await tokens.get(args.name)
    detail = {"name": info.name, "scopes": list(info.scopes), "expires_at": _iso(info.expires_at)}
    await audit.record(cli_actor(), "token.create", detail=detail)
    print(secret)
    expiry = "never expires" if info.expires_at is None else f"expires {_iso(info.expires_at)}"
    print(
        f"created token {info.name!r} ({', '.join(info.scopes)}; {expiry}). Store it now: it cannot be shown again.",
        file=sys.stderr,
    )
    return 0


async def _list(tokens: TokenService, audit: AuditLog, args: argparse.Namespace) -> int:
    infos = await tokens.list()
    now = utcnow()
    if args.json:
        print(json.dumps([info.to_json(now) for info in infos], indent=2))
        return 0
    if not infos:
        print("no tokens", file=sys.stderr)
        return 0
    _print_table(
        ["NAME", "PREFIX", "SCOPES", "CREATED", "EXPIRES", "LAST USED", "STATUS"],
        [_token_row(info, now) for info in infos],
    )
    return 0


async def _revoke(tokens: TokenService, audit: AuditLog, args: argparse.Namespace) -> int:
    info = await tokens.revoke(args.name)
    await audit.record(cli_actor(), "token.revoke", detail={"name": info.name, "prefix": info.prefix})
    print(f"revoked token {info.name!r} ({info.prefix}…)", file=sys.stderr)
    return 0


async def _audit(tokens: TokenService, audit: AuditLog, args: argparse.Namespace) -> int:
    if args.export is not None:
        try:
            appended = await export_events(audit.sessions, args.export)
        except AuditChainBroken as e:
            print(f"forkd-hub: error: {e}", file=sys.stderr)
            return 1
        print(f"{args.export}: appended {appended} event(s)", file=sys.stderr)
        if not args.verify:
            return 0
    if args.verify:
        path = args.export or audit.jsonl_path
        try:
            report = await verify_trail(audit.sessions, path, args.expect_head)
        except AuditChainBroken as e:
            print(f"forkd-hub: audit trail altered: {e}", file=sys.stderr)
            return 1
        head = report.head
        print(f"database: {head.count} events, hash chain intact")
        if path is not None:
            caught_up = f" (appended {report.appended} recorded since it was last written)" if report.appended else ""
            print(f"{path}: the same {head.count} events, line for line{caught_up}")
        print(f"head {head} (publish it; check later with --verify --expect-head {head})")
        return 0
    if args.expect_head is not None:
        raise ValueError("--expect-head goes with --verify")
    since = None
    if args.since is not None:
        window = parse_duration(args.since)
        if window is None:
            raise ValueError("--since needs a duration such as 24h or 7d, not 'never'")
        since = utcnow() - window
    events = await audit.query(
        action=args.action, repository=args.repository, actor=args.actor, since=since, limit=args.limit
    )
    if args.json:
        print(json.dumps(events, indent=2))
        return 0
    _print_table(
        ["AT", "ACTOR", "ACTION", "REPOSITORY", "REFERENCE", "DIGEST", "REMOTE"],
        [
            [e["at"], e["actor"], e["action"]]
            + [e[key] or "-" for key in ("repository", "reference", "digest", "remote")]
            for e in events
        ],
    )
    return 0


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


def _token_row(info: TokenInfo, now: Any) -> list[str]:
    return [
        info.name,
        info.prefix,
        ",".join(info.scopes),
        _iso(info.created_at) or "-",
        _iso(info.expires_at) or "never",
        _iso(info.last_used_at) or "never",
        info.status(now),
    ]


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
