"""clikit.helpdoc.document fills in what a subcommand's --help says, from a table, at any depth."""

from __future__ import annotations

import argparse

import pytest

from clikit.helpdoc import document


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tool")
    commands = p.add_subparsers(dest="command")
    thing = commands.add_parser("thing", help="one line")
    thing.add_argument("name")
    thing.add_argument("--size", help="already explained")
    nested = thing.add_subparsers(dest="thing_command").add_parser("make")
    nested.add_argument("count")
    commands.add_parser("bare")
    return p


def test_descriptions_argument_helps_and_examples_come_from_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    p = parser()
    document(
        p,
        {
            "thing": ("Do the thing.", {"name": "what to call it", "size": "ignored: it has a help"}, ["tool thing x"]),
            "thing make": ("Make COUNT things.", {"count": "how many"}, ["tool thing make 3"]),
        },
    )
    with pytest.raises(SystemExit):
        p.parse_args(["thing", "--help"])
    out = capsys.readouterr().out
    assert "Do the thing." in out and "what to call it" in out and "already explained" in out
    assert "ignored" not in out and out.rstrip().endswith("examples:\n  tool thing x")
    with pytest.raises(SystemExit):
        p.parse_args(["thing", "n", "make", "--help"])
    out = capsys.readouterr().out
    assert "Make COUNT things." in out and "how many" in out and "tool thing make 3" in out


def test_a_documented_subcommand_knows_its_usage_and_an_undocumented_one_is_left_alone() -> None:
    p = parser()
    document(p, {"thing": ("Do the thing.", {}, ["tool thing x"])})
    args = p.parse_args(["thing", "n"])
    assert args.command_usage().startswith("usage: tool thing")
    assert not hasattr(p.parse_args(["bare"]), "command_usage")


def test_unknown_arguments_are_reported_with_the_subcommands_usage(capsys) -> None:
    from clikit.helpdoc import parse_args

    p = argparse.ArgumentParser(prog="tool")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("thing").add_argument("x")
    document(p, {"thing": ("Do a thing.", {"x": "what"}, ["tool thing 1"])})
    assert parse_args(p, ["thing", "1"]).x == "1"
    with pytest.raises(SystemExit) as exit_:
        parse_args(p, ["thing", "1", "--force"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: tool thing [-h] x\n")
    assert "tool thing: error: unrecognized arguments: --force (see 'tool thing --help'" in err
