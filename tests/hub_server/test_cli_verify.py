"""``forkd-hub verify`` on the command line: exit codes, the human report (IEC sizes) and --json."""

from __future__ import annotations

import json

from hub_server.cli import main
from hub_server.cli_verify import PROBLEMS_FOUND
from hub_server.registry.core.paths import blob_key, quarantine_key
from hub_server.settings import default_storage
from manifest.digest import digest_bytes


def test_verify_exit_codes_report_and_json(make_hub, images, tmp_path, capsys):
    data_dir = tmp_path / "hub0"
    hub = make_hub(default_storage(data_dir))
    layer = hub.pusher(hub.token("admin", "admin")).push_chain("acme/vm", images[:1], tmp_path / "p", "v1")[0]
    argv = ["verify", "--data-dir", str(data_dir), "--grace", "0s"]

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "everything verified" in out and "KiB hashed" in out, out

    config = str(digest_bytes(layer.config, "sha256"))
    hub.call(hub.registry.ctx.store.put, blob_key(config), b"not the config")
    assert main([*argv, "--json"]) == PROBLEMS_FOUND
    report = json.loads(capsys.readouterr().out)
    assert report["clean"] is False and report["checked"]["blobs"] >= 3
    assert report["problems"] == [
        {
            "kind": "size",
            "key": blob_key(config),
            "subject": config,
            "reason": report["problems"][0]["reason"],
            "action": "reported",
            "movedTo": None,
        }
    ]

    assert main([*argv, "--quarantine"]) == PROBLEMS_FOUND
    out = capsys.readouterr().out
    assert f"size     {blob_key(config)}: " in out and f"[quarantined -> {quarantine_key(blob_key(config))}]" in out
    assert main([*argv, "--clear-marks", "--json"]) == PROBLEMS_FOUND  # now a row without its object
    report = json.loads(capsys.readouterr().out)
    assert report["marksCleared"] == 1 and [p["kind"] for p in report["problems"]] == ["missing"]


def test_verify_refuses_a_data_dir_without_a_hub(tmp_path, capsys):
    missing = tmp_path / "typo"
    assert main(["verify", "--data-dir", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no hub there" in err and "Traceback" not in err
    assert not missing.exists()
