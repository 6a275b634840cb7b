"""``forkd-hub token …`` and ``forkd-hub audit`` through ``register``, on a real SQLite file."""

import argparse
import asyncio
import json
import re

import pytest

from hub_server.audit import default_jsonl_path, verify_jsonl
from hub_server.auth.errors import Unauthorized
from hub_server.auth.tokens import TokenService
from hub_server.cli import main as hub_main
from hub_server.cli_tokens import cli_actor, main_for_tests, register
from hub_server.db.engine import make_engine, make_session_factory, sqlite_url

TOKEN = re.compile(r"fkd_[A-Za-z0-9_-]{43}")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("FORKD_HUB_DATA_DIR", raising=False)
    monkeypatch.delenv("FORKD_HUB_DATABASE_URL", raising=False)


@pytest.fixture(autouse=True)
def a_hub_in_tmp_path(tmp_path, capsys):
    """token and audit need an existing hub (they never create one): make one in tmp_path."""
    make_hub(tmp_path)
    capsys.readouterr()


def make_hub(data_dir) -> None:
    assert hub_main(["migrate", "--data-dir", str(data_dir)]) == 0


def authenticate(url: str, secret: str):
    async def go():
        engine = make_engine(url)
        try:
            return await TokenService(make_session_factory(engine)).authenticate(secret)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main_for_tests(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_prints_only_the_token(tmp_path, capsys):
    code, out, err = run(
        capsys,
        "token",
        "create",
        "ci",
        "--scope",
        "push:acme/*",
        "--expires",
        "30d",
        "--data-dir",
        str(tmp_path),
    )
    assert code == 0
    assert TOKEN.fullmatch(out.strip()) and out.count("\n") == 1
    assert "ci" in err and "cannot be shown again" in err
    principal = authenticate(sqlite_url(tmp_path), out.strip())
    assert principal.name == "ci" and principal.can("push", "acme/x")


def test_create_list_revoke_audit(tmp_path, capsys):
    d = str(tmp_path)
    _, secret, _ = run(
        capsys, "token", "create", "ci", "--scope", "pull:*/*", "--scope", "push:acme/*", "--data-dir", d
    )
    secret = secret.strip()

    code, out, _ = run(capsys, "token", "list", "--json", "--data-dir", d)
    assert code == 0 and secret not in out
    [listed] = json.loads(out)
    assert listed["name"] == "ci" and listed["scopes"] == ["pull:*/*", "push:acme/*"]
    assert listed["status"] == "active" and listed["prefix"] == secret[:8]
    assert listed["expires_at"] is not None  # tokens expire by default

    code, out, _ = run(capsys, "token", "list", "--data-dir", d)
    assert code == 0 and "ci" in out and "active" in out and secret not in out

    code, _, err = run(capsys, "token", "revoke", "ci", "--data-dir", d)
    assert code == 0 and "revoked" in err
    with pytest.raises(Unauthorized):
        authenticate(sqlite_url(tmp_path), secret)

    code, out, _ = run(capsys, "audit", "--json", "--data-dir", d)
    events = json.loads(out)
    assert [e["action"] for e in events] == ["token.revoke", "token.create"]
    assert {e["actor"] for e in events} == {cli_actor()} and cli_actor().startswith("cli:")
    assert events[1]["detail"]["scopes"] == ["pull:*/*", "push:acme/*"]
    assert secret not in out

    code, out, _ = run(capsys, "audit", "--action", "token.create", "--data-dir", d)
    assert code == 0 and "token.create" in out and "token.revoke" not in out
    code, out, _ = run(capsys, "audit", "--json", "--limit", "1", "--data-dir", d)
    assert len(json.loads(out)) == 1
    code, out, _ = run(capsys, "audit", "--json", "--since", "1h", "--repository", "acme/x", "--data-dir", d)
    assert json.loads(out) == []

    assert verify_jsonl(default_jsonl_path(tmp_path)) == 2
    code, out, _ = run(capsys, "audit", "--verify", "--data-dir", d)
    assert code == 0 and "database: 2 events, hash chain intact\n" in out
    assert f"{default_jsonl_path(tmp_path)}: the same 2 events, line for line\n" in out
    head = out.split("head ", 1)[1].split()[0]
    code, out, _ = run(capsys, "audit", "--verify", "--expect-head", head, "--data-dir", d)
    assert code == 0 and f"head {head}" in out
    # issue 16 item 3: editing the newest line keeps the chain valid but no longer matches the database
    path = default_jsonl_path(tmp_path)
    path.write_bytes(path.read_bytes().replace(b'"token.revoke"', b'"token.renew"'))
    assert verify_jsonl(path) == 2
    code, out, err = run(capsys, "audit", "--verify", "--data-dir", d)
    assert code == 1 and out == "" and "line 2: differs from the database's event 2" in err


def test_rejections_exit_1_with_a_message(tmp_path, capsys):
    d = str(tmp_path)
    code, out, err = run(capsys, "token", "create", "ci", "--scope", "pull:Acme", "--data-dir", d)
    assert code == 1 and out == "" and "'pull:Acme'" in err
    code, _, err = run(capsys, "token", "create", "ci", "--scope", "admin", "--expires", "soon", "--data-dir", d)
    assert code == 1 and "'soon'" in err
    assert run(capsys, "token", "create", "ci", "--scope", "admin", "--data-dir", d)[0] == 0
    code, out, err = run(capsys, "token", "create", "ci", "--scope", "admin", "--data-dir", d)
    assert code == 1 and out == "" and "already exists" in err
    code, _, err = run(capsys, "token", "revoke", "ghost", "--data-dir", d)
    assert code == 1 and "ghost" in err
    code, _, err = run(capsys, "audit", "--limit", "0", "--data-dir", d)
    assert code == 1 and "limit" in err


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main_for_tests(["token", "create", "ci", "--data-dir", str(tmp_path)]) == 2  # no --scope
    assert main_for_tests(["token"]) == 2
    assert "--scope" in capsys.readouterr().err


def test_data_dir_and_database_url_from_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORKD_HUB_DATA_DIR", str(tmp_path / "from-env"))
    make_hub(tmp_path / "from-env")
    capsys.readouterr()
    _, secret, _ = run(capsys, "token", "create", "ci", "--scope", "admin", "--expires", "never")
    assert (tmp_path / "from-env" / "hub.db").exists()
    assert authenticate(sqlite_url(tmp_path / "from-env"), secret.strip()).is_admin

    other = tmp_path / "elsewhere.db"
    monkeypatch.setenv("FORKD_HUB_DATABASE_URL", f"sqlite+aiosqlite:///{other}")
    make_hub(tmp_path / "from-env")
    capsys.readouterr()
    assert run(capsys, "token", "create", "ci2", "--scope", "admin")[0] == 0
    assert other.exists()
    _, out, _ = run(capsys, "token", "list", "--json")
    assert [t["name"] for t in json.loads(out)] == ["ci2"]


def test_default_data_dir_is_relative_to_the_working_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "token", "list")[0] == 1  # no hub in ./forkd-hub-data yet: refused, nothing created
    assert not (tmp_path / "forkd-hub-data").exists()
    make_hub("forkd-hub-data")
    assert run(capsys, "token", "list")[0] == 0
    assert (tmp_path / "forkd-hub-data" / "hub.db").exists()


def test_register_plugs_into_another_parser(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="forkd-hub")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve")  # the registry's own commands live alongside
    register(commands)
    args = parser.parse_args(["token", "create", "x", "--scope", "pull:a/b", "--data-dir", str(tmp_path)])
    assert args.func(args) == 0
    assert TOKEN.fullmatch(capsys.readouterr().out.strip())
    assert parser.parse_args(["serve"]).command == "serve"
