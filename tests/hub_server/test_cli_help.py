"""Issue 16 item 14: every ``forkd-hub`` subcommand's --help has a description, explained arguments
and an example; --version works; a bad flag value shows the subcommand's usage."""

from __future__ import annotations

import pytest

from hub_server.cli import build_parser, main
from tests.forkd_client.test_cli_help import all_commands, check_help


@pytest.mark.parametrize("path", all_commands(build_parser), ids=" ".join)
def test_every_subcommand_help_has_a_description_explained_arguments_and_an_example(path, capsys):
    def run(argv):
        build_parser().parse_args(argv)

    check_help("forkd-hub ", run, build_parser, path, capsys)


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("forkd-hub 0.")


def test_a_bad_flag_value_shows_the_subcommands_usage(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORKD_HUB_GC_GRACE", "soon")
    assert main(["gc", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "FORKD_HUB_GC_GRACE" in err and "usage: forkd-hub gc " in err
