"""``forkd-hub repo policy`` and the retention part of ``forkd-hub gc`` in-process, on a real data directory."""

from __future__ import annotations

import json

from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.cli import main
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient


def _hub_with_nightlies(tmp_path, images) -> tuple[str, list[str]]:
    data = tmp_path / "data"
    with TestClient(create_app(Settings.for_data_dir(data))) as client:
        token = client.blocking_portal.call(client.app.state.tokens.create, "admin", ["admin"], None)
        pusher = PushClient(client, token)
        layers = pusher.push_chain("acme/ci", images[:2], tmp_path / "p", "nightly-2")
        pusher.push_layer("acme/ci", layers[0], "nightly-1")
        pusher.push_layer("acme/ci", layers[1], "nightly-2")  # set again: the most recently set tag
    return str(data), [layer.digest for layer in layers]


def test_policy_is_shown_changed_and_bad_values_are_named(tmp_path, images, capsys):
    data, _ = _hub_with_nightlies(tmp_path, images)
    assert main(["repo", "policy", "acme/ci", "--data-dir", data]) == 0
    assert capsys.readouterr().out.splitlines() == ["immutable tags: off (the hub default)", "retention: none"]

    assert (
        main(
            [
                "repo",
                "policy",
                "acme/ci",
                "--immutable-tags",
                "on",
                "--keep-last",
                "1",
                "--retention-pattern",
                "nightly-*",
                "--json",
                "--data-dir",
                data,
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {
        "immutableTags": True,
        "immutableExempt": "latest",
        "immutableSource": "repository",
        "retention": {"keepLast": 1, "keepDays": None, "pattern": "nightly-*"},
    }

    assert main(["repo", "policy", "acme/ci", "--keep-days", "0", "--data-dir", data]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "retention.keepDays" in err and "Traceback" not in err
    assert main(["repo", "policy", "acme/nope", "--immutable-tags", "off", "--data-dir", data]) == 1
    assert "acme/nope not found" in capsys.readouterr().err
    assert main(["repo", "policy", "acme/ci", "--no-retention", "--keep-last", "2", "--data-dir", data]) == 1
    assert "--no-retention cannot be combined" in capsys.readouterr().err
    assert main(["repo", "policy", "acme/ci", "--data-dir", data]) == 0  # the failed changes changed nothing
    assert "keep the last 1; GC removes the others" in capsys.readouterr().out


def test_gc_dry_run_shows_what_retention_would_remove_and_removes_nothing(tmp_path, images, capsys):
    data, digests = _hub_with_nightlies(tmp_path, images)
    assert main(["repo", "policy", "acme/ci", "--keep-last", "1", "--data-dir", data]) == 0
    capsys.readouterr()
    for _ in range(2):  # the second dry run finds the same: the first removed nothing
        assert main(["gc", "--dry-run", "--grace", "0s", "--data-dir", data]) == 0
        out = capsys.readouterr().out
        assert "retention would remove 1 tag(s):" in out
        header, row = out.splitlines()[1:3]
        assert header.split() == ["REPOSITORY", "TAG", "DIGEST", "SET", "WHY"]
        assert row.split()[:3] == ["acme/ci", "nightly-1", digests[0][:19] + "…"]
        assert "not among the last 1 of the tags matching *" in row
        assert "would delete 0 manifest(s)" in out  # nightly-1's layer is nightly-2's parent

    assert main(["gc", "--grace", "0s", "--json", "--data-dir", data]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(e["tag"], e["digest"]) for e in report["retention"]] == [("nightly-1", digests[0])]
    assert report["manifests"] == [] and report["retention_manifests"] == []
    assert main(["gc", "--dry-run", "--json", "--data-dir", data]) == 0
    assert json.loads(capsys.readouterr().out)["retention"] == []


def test_quota_is_shown_set_and_bad_values_are_named(tmp_path, images, capsys):
    data, _ = _hub_with_nightlies(tmp_path, images)
    assert main(["quota", "acme", "--data-dir", data]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("acme: ") and line.endswith("used, no storage quota")
    assert main(["quota", "acme", "--set", "1GiB", "--json", "--data-dir", data]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["quotaBytes"] == 1 << 30 and shown["usedBytes"] > 0 and shown["source"] == "namespace"
    assert main(["quota", "acme", "--data-dir", data]) == 0
    assert "of 1.0 GiB used" in capsys.readouterr().out
    assert main(["quota", "acme", "--set", "none", "--json", "--data-dir", data]) == 0
    assert json.loads(capsys.readouterr().out)["quotaBytes"] is None
    assert main(["quota", "acme", "--set", "lots", "--data-dir", data]) == 1
    assert "lots" in capsys.readouterr().err
    assert main(["quota", "Not/Valid", "--data-dir", data]) == 1
