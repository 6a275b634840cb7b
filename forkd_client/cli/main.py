"""``forkd``: the command-line client.

One module per command group registers its subcommands here (``COMMAND_MODULES``); each
module exposes ``register(subparsers, common)`` and sets ``func(args, ctx) -> int`` on
every parser it adds. Adding a group (login, push, pull, snapshot, fork …) is one new
module and one line below.

Exit codes: one per class of failure (:mod:`.exitcodes`: 1 error, 2 usage, 3 auth, 4 conflict,
5 network, 6 verification, 130 interrupted), chosen here for every command from the error it
raised; messages are printed as ``forkd: error: <message>``. Tracebacks never reach users; set
``FORKD_DEBUG=1`` to see them for unexpected errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from clikit.helpdoc import parse_args
from clikit.quickexit import run_and_exit
from manifest.errors import ManifestError

from ..config import forkd_home
from ..diskspace import is_no_space, no_space_message
from ..errors import ClientError, InvalidTag, UsageError
from ..exitcodes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, exit_code_for
from ..hub.errors import InvalidReference
from ..localdb import skipped_writes
from . import bake, fleet, guest, hub_commands, images, keys, local, manage_commands, packs, vmcmds
from .helptext import HELP, document
from .output import Context

#: command groups, in the order ``forkd --help`` lists them
COMMAND_MODULES: tuple[ModuleType, ...] = (
    images,
    local,
    packs,
    hub_commands,
    manage_commands,
    fleet,
    keys,
    vmcmds,
    bake,
    guest,
)


def build_parser() -> argparse.ArgumentParser:
    """The full ``forkd`` parser with every registered command group."""
    # --home is accepted before or after the subcommand; SUPPRESS keeps a subparser from
    # overwriting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="store root (overrides FORKD_HOME; default: $XDG_DATA_HOME/forkd or ~/.local/share/forkd)",
    )
    parser = argparse.ArgumentParser(
        prog="forkd",
        parents=[common],
        description="forkd-hub client: local microVM snapshots, chains and forkd packs.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub, common)
    document(parser, HELP)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (importlib.metadata's lookup costs
    every command ~15 ms, a pull's start-up included, if done while the parser is built)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help="show program's version number and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        sys.stdout.write(f"forkd {_version()}\n")  # on stdout, as argparse's own version action
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forkd-hub")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``forkd`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    try:
        args = parse_args(parser, None if argv is None else list(argv))
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    home = getattr(args, "home", None) or forkd_home()
    ctx = Context(home=Path(home), stdout=sys.stdout, stderr=sys.stderr)
    try:
        code = int(args.func(args, ctx))
        _warn_unrecorded(ctx)
        return code
    except KeyboardInterrupt as e:  # Interrupted says what can be resumed
        ctx.error(str(e) or "interrupted")
        return EXIT_INTERRUPTED
    except (ClientError, ManifestError) as e:
        ctx.error(str(e))
        usage = getattr(args, "command_usage", None)
        if isinstance(e, InvalidReference | InvalidTag | UsageError) and usage is not None:  # an argument was wrong
            ctx.stderr.write(usage())
        return exit_code_for(e)
    except OSError as e:
        ctx.error(_describe_os_error(e, ctx.home))
        return EXIT_ERROR
    except Exception as e:  # a bug: say so plainly, keep the traceback for FORKD_DEBUG
        if os.environ.get("FORKD_DEBUG"):
            raise
        ctx.error(f"internal error ({type(e).__name__}: {e}); rerun with FORKD_DEBUG=1 for details")
        return EXIT_ERROR


def run() -> None:
    """The ``forkd`` console script: :func:`main` on ``sys.argv``, then a quick exit
    (:func:`clikit.quickexit.run_and_exit`: no object-by-object interpreter teardown)."""
    run_and_exit(main)


def _describe_os_error(e: OSError, home: Path | None = None) -> str:
    if is_no_space(e):
        return no_space_message(e.filename, home)
    if e.filename is not None:
        return f"{e.strerror or e}: {e.filename}"
    return str(e)


def _warn_unrecorded(ctx: Context) -> None:
    """A full disk kept the store's records from being updated (forkd_client.localdb): say so, once."""
    for path, count in skipped_writes().items():
        ctx.warn(
            f"{count} update(s) of {Path(path).name} skipped (what they would have kept is hashed or fetched "
            f"again next time): {no_space_message(path, ctx.home)}"
        )


if __name__ == "__main__":
    run()
