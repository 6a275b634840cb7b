"""What the ``forkd-hub`` subcommands that open a hub share (``token``, ``audit``, ``webhook``): the store
flags, the audit actor, running one command on an opened hub, and a test entry point.

Exit status of :func:`run_on_hub`: the command's own, or 1 with one ``forkd-hub: error: …`` line on stderr for
a rejected request or an unusable hub (never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from hub_server.auth.errors import AuthError
from hub_server.compose import HubServices, HubStartError, open_hub, redacted_url
from hub_server.errors import HubError
from hub_server.settings import DEFAULT_DATA_DIR, SettingsError, env_name, load_settings
from hub_server.storage.errors import StorageError

__all__ = ["STORE_FLAGS", "add_store_args", "cli_actor", "main_for_tests", "run_on_hub"]

#: The settings every command that opens the hub's database and store accepts.
STORE_FLAGS = ("data_dir", "storage", "database_url")


def add_store_args(parser: argparse.ArgumentParser) -> None:
    """``--data-dir``, ``--storage`` and ``--database-url`` (each also a ``FORKD_HUB_*`` variable)."""
    helps = {
        "data_dir": (f"data directory (default {DEFAULT_DATA_DIR})", "DIR"),
        "storage": ("blob store spec, e.g. 'filesystem root=/srv/blobs' (default: DIR/blobs)", "SPEC"),
        "database_url": ("SQLAlchemy URL (default: sqlite+aiosqlite:///DIR/hub.db)", "URL"),
    }
    for name, (help_text, metavar) in helps.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            metavar=metavar,
            help=f"{help_text} [env {env_name(name)}]",
        )


def cli_actor() -> str:
    """The audit actor for CLI actions: ``cli:<login user>``."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no passwd entry (some containers)
        user = f"uid{os.getuid()}"
    return f"cli:{user}"


def run_on_hub(
    args: argparse.Namespace,
    command: Callable[[HubServices], Awaitable[int]],
    *,
    create: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> int:
    """Build the settings from ``args``' store flags (and ``extra`` settings, None meaning unset), open the
    hub (``create``: may it make a new one),
    run ``command`` on it once under ``asyncio.run`` and return its exit status.

    Raises nothing: bad settings, a rejected request (``AuthError``, ``HubError``, ``ValueError``, ``LookupError``), an
    unusable data dir, store or database (``OSError``, ``StorageError``, ``HubStartError``, ``SQLAlchemyError``) print one line and
    return 1.
    """
    try:
        settings = load_settings({name: getattr(args, name, None) for name in STORE_FLAGS} | dict(extra or {}))
    except SettingsError as e:
        print(f"forkd-hub: error: {e}", file=sys.stderr)
        return 1

    async def go() -> int:
        async with open_hub(settings, create=create) as hub:
            return await command(hub)

    try:
        return asyncio.run(go())
    except (AuthError, HubError, StorageError, ValueError, LookupError, OSError, HubStartError) as e:
        print(f"forkd-hub: error: {getattr(e, 'message', None) or e}", file=sys.stderr)
        return 1
    except SQLAlchemyError as e:
        print(f"forkd-hub: database error ({redacted_url(settings.database_url)}): {e}", file=sys.stderr)
        return 1


def main_for_tests(register: Callable[[argparse._SubParsersAction], None], argv: Sequence[str]) -> int:
    """Parse ``argv`` with a parser holding only the commands ``register`` adds and run it; return the status
    (2 for a usage error, as ``forkd-hub`` itself)."""
    parser = argparse.ArgumentParser(prog="forkd-hub")
    register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    return int(args.func(args))
