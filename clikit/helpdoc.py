"""What ``COMMAND --help`` says beyond one line: a description, the arguments the registering module left
unexplained, and examples, applied by :func:`document` to the built parser from one table per CLI
(``forkd_client/cli/helptext.py``, ``hub_server/cli_help.py``), so a command module stays about behaviour.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

__all__ = ["HelpFormatter", "HelpTable", "document", "parse_args"]

#: command path ("token create") → (description, {dest: help for arguments without one}, examples)
HelpTable = dict[str, tuple[str, dict[str, str], list[str]]]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs kept as written; argument helps wrapped at spaces only, so a path, an
    option or a name with hyphens (``docs/lazy-fork.md``, ``--profile-exec``) stays whole and can be
    copied or searched for."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)


def document(parser: argparse.ArgumentParser, table: HelpTable) -> None:
    """Give every subcommand of ``parser`` its description, missing argument helps and examples from ``table``.

    A documented subcommand also gets ``command_usage`` (its ``format_usage``) as a default, so an error about
    one of its arguments can show that subcommand's usage. Raises nothing.
    """

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        for action in p._actions:  # noqa: SLF001 - argparse has no public listing
            if not isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                continue
            for name, sub in action.choices.items():
                key = " ".join([*path, name])
                if key in table:
                    description, arguments, examples = table[key]
                    sub.description = description
                    sub.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
                    sub.formatter_class = HelpFormatter
                    sub.set_defaults(
                        command_usage=sub.format_usage, command_prog=sub.prog
                    )  # for errors about an argument
                    for arg in sub._actions:  # noqa: SLF001
                        if arg.help is None and arg.dest in arguments:
                            arg.help = arguments[arg.dest]
                walk(sub, [*path, name])

    walk(parser, [])


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that arguments the chosen subcommand does not know are
    reported with that subcommand's usage (``forkd tag A B --force`` shows ``forkd tag``'s), not the
    top-level one that lists only COMMAND. Raises SystemExit(2) for a usage error, as argparse does."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        prog = getattr(args, "command_prog", None)
        usage = getattr(args, "command_usage", None)
        if prog is None or usage is None:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        sys.stderr.write(usage())
        sys.stderr.write(
            f"{prog}: error: unrecognized arguments: {' '.join(extras)} (see '{prog} --help' for what it takes)\n"
        )
        raise SystemExit(2)
    return args
