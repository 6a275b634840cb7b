"""hub_server.cli_common: one way for a hub subcommand to open the hub, run, and answer errors in one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hub_server.cli_common import STORE_FLAGS, main_for_tests, run_on_hub
from hub_server.compose import HubServices


def store_args(**values: str | None) -> argparse.Namespace:
    return argparse.Namespace(**{name: values.get(name) for name in STORE_FLAGS})


def test_a_command_runs_on_the_opened_hub_and_its_status_is_returned(tmp_path: Path) -> None:
    seen: list[HubServices] = []

    async def command(hub: HubServices) -> int:
        seen.append(hub)
        return 7

    assert run_on_hub(store_args(data_dir=str(tmp_path / "hub")), command) == 7
    assert len(seen) == 1 and (tmp_path / "hub").is_dir()


def test_errors_are_one_line_and_status_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def rejected(hub: HubServices) -> int:
        raise LookupError("no webhook 42")

    assert run_on_hub(store_args(data_dir=str(tmp_path)), rejected) == 1
    assert capsys.readouterr().err == "forkd-hub: error: no webhook 42\n"
    assert run_on_hub(store_args(data_dir=str(tmp_path), storage="nonsense"), rejected) == 1
    err = capsys.readouterr().err
    assert err.startswith("forkd-hub: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_main_for_tests_parses_with_only_the_registered_commands(capsys: pytest.CaptureFixture[str]) -> None:
    def register(subparsers: argparse._SubParsersAction) -> None:
        subparsers.add_parser("hello").set_defaults(func=lambda args: 3)

    assert main_for_tests(register, ["hello"]) == 3
    assert main_for_tests(register, ["token", "list"]) == 2  # not registered here: a usage error
    assert "invalid choice" in capsys.readouterr().err
