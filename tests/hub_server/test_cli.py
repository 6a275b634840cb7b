"""``forkd-hub migrate`` and ``forkd-hub gc`` in-process (``serve`` runs in tests/e2e)."""

from __future__ import annotations

import json
import os
import re
import sqlite3

import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.cli import build_parser, main
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient


def test_migrate_is_idempotent(tmp_path, capsys):
    assert main(["migrate", "--data-dir", str(tmp_path)]) == 0
    assert "applied revision(s) 0001, 0002" in capsys.readouterr().out
    assert main(["migrate", "--data-dir", str(tmp_path)]) == 0
    assert "already up to date" in capsys.readouterr().out
    assert (tmp_path / "hub.db").exists()


def test_gc_dry_run_then_for_real(tmp_path, capsys, images):
    data = tmp_path / "data"
    settings = Settings.for_data_dir(data)
    with TestClient(create_app(settings)) as client:
        token = client.blocking_portal.call(client.app.state.tokens.create, "admin", ["admin"], None)
        pusher = PushClient(client, token)
        pusher.push_chain("acme/vm", images[:1], tmp_path / "p", "v1")
        other = tmp_path / "other.bin"
        other.write_bytes(os.urandom(2 * 65536))
        pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", other, b"x", tmp_path / "u"))  # untagged

    assert main(["gc", "--data-dir", str(data), "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True and report["manifests"] == []  # everything is younger than 1h

    assert main(["gc", "--data-dir", str(data), "--grace", "0s", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert out.out.count("would delete manifest ") == 1 and "would delete blob " in out.out
    assert "would delete 1 manifest(s)" in out.out and out.err == ""  # a report: stdout (issue 16 item 14)
    assert re.search(r"orphan object\(s\): \d+\.\d (KiB|MiB); kept", out.out), out.out  # IEC, not raw bytes

    def objects() -> int:  # blob objects and frame packs
        return sum(1 for d in ("blobs", "packs") for p in (data / "blobs" / d).rglob("*") if p.is_file())

    blobs_before = objects()
    assert main(["gc", "--data-dir", str(data), "--grace", "0s", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["manifests"]) == 1 and report["bytes_freed"] > 0
    # the untagged layer's data blob was pushed as a recipe: no object of its own, its pack goes instead
    assert len(report["pack_objects"]) == 1
    assert objects() == blobs_before - (len(report["blobs"]) - 1) - 1 - len(report["orphan_objects"])
    with TestClient(create_app(settings)) as client:  # what the tag reaches still pulls
        assert PushClient(client, token).pull("acme/vm", "v1", tmp_path / "pull")


def test_bad_settings_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORKD_HUB_GC_GRACE", "soon")
    assert main(["gc", "--data-dir", str(tmp_path)]) == 1
    assert "FORKD_HUB_GC_GRACE" in capsys.readouterr().err


def test_every_command_is_registered():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse has no public listing
    assert {"serve", "migrate", "gc", "token", "audit"} <= set(commands)
    args = parser.parse_args(["serve", "--port", "0", "--storage", "memory", "--gc-interval", "1h"])
    assert (args.port, args.storage, args.gc_interval) == ("0", "memory", "1h")


@pytest.mark.parametrize(
    "argv",
    [
        ["token", "list"],
        ["token", "create", "ci", "--scope", "admin"],
        ["token", "revoke", "ci"],
        ["audit"],
        ["audit", "--verify"],
        ["gc", "--dry-run"],
        ["webhook", "list"],
        ["webhook", "add", "acme", "http://127.0.0.1:9/"],
        ["webhook", "remove", "1"],
        ["webhook", "deliveries"],
    ],
)
def test_commands_refuse_a_data_dir_without_a_hub_and_create_nothing(tmp_path, capsys, argv):
    """Issue 16 item 12: a typo in --data-dir is refused with one line, never a new empty hub."""
    missing = tmp_path / "typo"
    assert main([*argv, "--data-dir", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"data directory {missing} does not exist: no hub there" in err
    assert f"'forkd-hub serve --data-dir {missing}'" in err
    assert not missing.exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*argv, "--data-dir", str(empty)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{empty / 'hub.db'} does not exist: no hub there" in err, err
    assert list(empty.iterdir()) == []

    elsewhere = tmp_path / "empty.db"
    sqlite3.connect(elsewhere).close()  # an existing but empty database
    assert main([*argv, "--data-dir", str(empty), "--database-url", f"sqlite+aiosqlite:///{elsewhere}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is empty: no hub there" in err, err


def test_serve_refuses_an_unusable_data_dir_with_one_line(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    for data_dir in (a_file, a_file / "below"):
        assert main(["serve", "--port", "0", "--data-dir", str(data_dir)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"forkd-hub: error: data directory {data_dir} is unusable" in err


def test_serve_names_a_missing_database_driver_in_one_line(tmp_path, capsys):
    url = "postgresql+nosuchdriver://hub@127.0.0.1/hub"
    assert main(["serve", "--port", "0", "--data-dir", str(tmp_path), "--database-url", url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "forkd-hub: error: database" in err
