"""Issue 16 item 14: every ``forkd`` subcommand's --help has a description, explained arguments and
an example; --version works; an error about an argument shows that subcommand's usage."""

from __future__ import annotations

import argparse

import pytest

from forkd_client.cli.main import build_parser, main


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from subcommands(sub, (*path, name))


def all_commands(build) -> list[tuple[str, ...]]:
    return [path for path, _ in subcommands(build())]


def check_help(prog: str, run, build, path: tuple[str, ...], capsys) -> None:
    parser = dict(subcommands(build()))[path]
    with pytest.raises(SystemExit) as exit_info:
        run([*path, "--help"])
    assert exit_info.value.code in (0, None)
    text = capsys.readouterr().out
    assert parser.description and " ".join(parser.description.split()) in " ".join(text.split()), text
    unexplained = [a.dest for a in parser._actions if not a.help and a.dest != "help"]  # noqa: SLF001
    assert unexplained == [], (path, unexplained)
    examples = text.split("examples:\n", 1)
    assert len(examples) == 2, text
    assert all(
        line.strip().startswith((prog, "forkd-hub ", "FORKD_", "forkd ")) for line in examples[1].strip().splitlines()
    ), examples[1]


@pytest.mark.parametrize("path", all_commands(build_parser), ids=" ".join)
def test_every_subcommand_help_has_a_description_explained_arguments_and_an_example(path, capsys):
    def run(argv):
        build_parser().parse_args(argv)

    check_help("forkd ", run, build_parser, path, capsys)


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("forkd 0.")


def test_an_invalid_argument_shows_the_subcommands_usage(capsys, tmp_path):
    assert main(["--home", str(tmp_path), "pull", "Bad/ref"]) == 2  # usage
    err = capsys.readouterr().err
    assert "forkd: error: invalid reference 'Bad/ref'" in err
    assert "usage: forkd pull " in err


def test_one_child_is_singular():
    from forkd_client.units import plural

    assert plural(1, "child", "children") == "1 child"
    assert plural(0, "child", "children") == "0 children"
    assert plural(3, "child", "children") == "3 children"
