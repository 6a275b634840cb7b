"""``forkd fork --lazy`` / ``forkd pull --lazy``: refusals before anything starts (exit 2, the
reason named, nothing left behind). The real runs are in test_lazy_fork_e2e.py."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from forkd_client.cli.main import main


def cli(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["fork", "acme/vm:v1", "--lazy"], "forkd fork --lazy needs --exec CMD"),
        (["fork", "vm", "--as", "other", "--exec", "true"], "--as and --save-profile are options of a lazy fork"),
        (["fork", "vm", "--save-profile", "--exec", "true"], "they need --lazy"),
        (["fork", "acme/vm:v1", "--lazy", "--keep", "--save-profile"], "does not combine with --keep"),
        (["fork", "Not A Ref!", "--lazy", "--exec", "true"], "Not A Ref!"),
        (["pull", "acme/vm:v1", "--lazy", "--hub", "http://x/registry.json"], "pull --lazy takes a hub reference"),
        (["push", "vm", "acme/vm:v1", "--profile-exec", "true"], "it needs --record-profile"),
    ],
)
def test_lazy_usage_errors_exit_2_and_name_the_problem(tmp_path: Path, argv: list[str], why: str) -> None:
    code, out, err = cli(tmp_path / "home", *argv)
    assert code == 2, (out, err)
    assert why in err and "Traceback" not in err
    assert not (tmp_path / "home" / ".staging").exists()


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("fork", ["--lazy", "--save-profile", "--as"]),
        ("pull", ["--lazy"]),
        ("push", ["--record-profile", "--profile-exec"]),
    ],
)
def test_the_help_explains_lazy(tmp_path: Path, command: str, words: list[str]) -> None:
    code, out, _ = cli(tmp_path, command, "--help")
    assert code == 0
    assert all(word in out for word in words) and "docs/lazy-fork.md" in out
