"""``forkd-hub repo policy NS/REPO`` (the other ``repo`` verbs are in ``cli_repo_manage``): show or change a repository's immutable-tags and retention policy;
``forkd-hub quota NS``: show or change a namespace's storage quota (docs/limits.md; over HTTP
``GET``/``PUT /api/v1/namespaces/{ns}/quota``).

Like ``forkd-hub webhook``, it builds its settings from ``--data-dir``, ``--database-url``,
``--storage`` (or their ``FORKD_HUB_*`` variables), enters ``compose.open_hub`` and runs once,
as an operator with admin rights (audited as ``policy``, actor ``cli:<login user>``). Over HTTP
the same change is ``PATCH /api/v1/repositories/{ns}/{repo}`` with an admin token.

Exit status: 0 success, 1 a rejected change (unknown repository, bad value: the message names it), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from clikit.units import human_size
from hub_server.auth.scopes import Principal
from hub_server.cli_common import add_store_args, cli_actor, run_on_hub
from hub_server.cli_repo_manage import add_commands
from hub_server.compose import HubServices
from hub_server.db.models_limits import UNLIMITED
from hub_server.errors import HubError
from hub_server.registry.content.policy import UNCHANGED, EffectivePolicy, PolicyChange
from hub_server.registry.content.quotas import QuotaStatus
from hub_server.registry.core.names import check_repository
from hub_server.settings import parse_size

__all__ = ["register"]

_DEFAULT = "default"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``repo`` command (``list``, ``show``, ``set``, ``delete-tag``: ``cli_repo_manage``; ``policy``)."""
    repo = subparsers.add_parser(
        "repo", help="repositories: list, show, set visibility/description/README, delete a tag, tag policies"
    )
    commands = repo.add_subparsers(dest="repo_command", metavar="COMMAND", required=True)
    add_commands(commands)
    policy = commands.add_parser("policy", help="show or change a repository's immutable-tags and retention policy")
    policy.add_argument("repository", metavar="NS/REPO")
    policy.add_argument(
        "--immutable-tags",
        choices=("on", "off", _DEFAULT),
        help="tags never move once set (on), may move (off), or follow the hub's default",
    )
    policy.add_argument(
        "--immutable-exempt",
        metavar="GLOBS",
        help="comma-separated tag globs that stay movable, or 'default' (the hub's)",
    )
    policy.add_argument("--keep-last", type=int, metavar="N", help="retention: keep the N most recently set tags")
    policy.add_argument("--keep-days", type=int, metavar="D", help="retention: keep the tags set within D days")
    policy.add_argument(
        "--retention-pattern",
        metavar="GLOBS",
        help="retention applies to the tags matching these globs (default every tag)",
    )
    policy.add_argument("--no-retention", action="store_true", help="remove the retention policy")
    policy.add_argument("--json", action="store_true", help="print the resulting policy as JSON")
    add_store_args(policy)
    policy.set_defaults(func=_policy)

    quota = subparsers.add_parser("quota", help="show or change a namespace's storage quota (unique bytes it holds)")
    quota.add_argument("namespace", metavar="NS")
    quota.add_argument(
        "--set",
        dest="set_to",
        metavar="SIZE",
        help="the quota: a size (10GiB), 'default' (the hub's FORKD_HUB_NAMESPACE_QUOTA) or 'none' (unlimited)",
    )
    quota.add_argument("--json", action="store_true", help="print the quota and usage as JSON")
    add_store_args(quota)
    quota.set_defaults(func=_quota)


def _change(args: argparse.Namespace) -> PolicyChange:
    retention_flags = (args.keep_last, args.keep_days, args.retention_pattern)
    if args.no_retention and any(v is not None for v in retention_flags):
        raise ValueError("--no-retention cannot be combined with --keep-last, --keep-days or --retention-pattern")
    retention: Any = UNCHANGED
    if args.no_retention:
        retention = None
    elif any(v is not None for v in retention_flags):
        retention = {"keepLast": args.keep_last, "keepDays": args.keep_days, "pattern": args.retention_pattern}
    immutable: Any = UNCHANGED if args.immutable_tags is None else {"on": True, "off": False}.get(args.immutable_tags)
    exempt: Any = (
        UNCHANGED
        if args.immutable_exempt is None
        else (None if args.immutable_exempt == _DEFAULT else args.immutable_exempt)
    )
    return PolicyChange(immutable_tags=immutable, immutable_exempt=exempt, retention=retention)


def describe(policy: EffectivePolicy) -> list[str]:
    """The policy as a few human lines."""
    source = "this repository" if policy.immutable_source == "repository" else "the hub default"
    lines = [
        f"immutable tags: {'on' if policy.immutable_tags else 'off'} ({source})"
        + (f", exempt: {policy.immutable_exempt or '(none)'}" if policy.immutable_tags else "")
    ]
    if policy.retention is None:
        lines.append("retention: none")
    else:
        rules = [
            f"the last {policy.retention.keep_last}" if policy.retention.keep_last is not None else "",
            f"those set within {policy.retention.keep_days} day(s)" if policy.retention.keep_days is not None else "",
        ]
        lines.append(
            f"retention: of the tags matching {policy.retention.pattern}, keep "
            + " and ".join(r for r in rules if r)
            + "; GC removes the others"
        )
    return lines


def _policy(args: argparse.Namespace) -> int:
    try:
        change = _change(args)
        namespace, _, name = args.repository.partition("/")
        if not name:
            raise ValueError(f"{args.repository!r} is not NS/REPO")
    except ValueError as e:  # SettingsError too: a bad tag pattern
        print(f"forkd-hub: error: {e}", file=sys.stderr)
        return 1

    async def show_or_change(hub: HubServices) -> int:
        operator = Principal.with_scopes(cli_actor(), ["admin"])
        if change.empty:
            detail = await hub.registry.catalog.repository(await hub.registry.scope(operator, namespace, name, "pull"))
        else:
            scope = await hub.registry.scope(operator, namespace, name, "push")
            detail = await hub.registry.catalog.update(scope, policy=change)
        assert detail.policy is not None
        if args.json:
            print(json.dumps(detail.policy.to_json(), indent=2))
        else:
            print("\n".join(describe(detail.policy)))
        return 0

    return run_on_hub(args, show_or_change, create=False)


def describe_quota(status: QuotaStatus) -> str:
    """One line: what the namespace uses of its quota."""
    if status.limit is None:
        return f"{status.namespace}: {human_size(status.used)} used, no storage quota"
    share = f" ({100 * status.used / status.limit:.0f}%)" if status.limit else ""
    return f"{status.namespace}: {human_size(status.used)} of {human_size(status.limit)} used{share} (quota from {status.source})"


def _quota_value(text: str) -> int | None:
    if text == _DEFAULT:
        return None
    if text in ("none", "unlimited"):
        return UNLIMITED
    return parse_size(text)


def _quota(args: argparse.Namespace) -> int:
    try:
        check_repository(args.namespace, "x")
        value = None if args.set_to is None else _quota_value(args.set_to)
    except (ValueError, HubError) as e:  # SettingsError: a bad size; NAME_INVALID
        print(f"forkd-hub: error: {e}", file=sys.stderr)
        return 1

    async def show_or_change(hub: HubServices) -> int:
        if args.set_to is None:
            status = await hub.registry.quotas.status(args.namespace)
        else:
            status = await hub.registry.quotas.set(args.namespace, value)
        print(json.dumps(status.to_json(), indent=2) if args.json else describe_quota(status))
        return 0

    return run_on_hub(args, show_or_change, create=False)
