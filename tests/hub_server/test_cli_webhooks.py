"""``forkd-hub webhook …`` on a real SQLite file; queued deliveries survive a restart."""

from __future__ import annotations

import asyncio
import io
import json
import time

import pytest
from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.cli_webhooks import main_for_tests
from hub_server.compose import open_hub
from hub_server.settings import Settings
from tests.hub_server.webhooks.conftest import FAST
from tests.hub_server.webhooks.receiver import Receiver
from tests.hub_server.webhooks.test_webhooks_doc import examples

SECRET = "a-secret-nobody-may-see"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("FORKD_HUB_DATA_DIR", "FORKD_HUB_DATABASE_URL", "FORKD_HUB_WEBHOOK_ALLOW"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def existing_hub(tmp_path, capsys):
    """``webhook`` commands need an existing hub (issue 16): make one where every test points."""
    from hub_server.cli import main

    assert main(["migrate", "--data-dir", str(tmp_path)]) == 0
    capsys.readouterr()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main_for_tests(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def add_with_secret(tmp_path, capsys, monkeypatch, *extra: str) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    code, out, err = run(
        capsys,
        "webhook",
        "add",
        "acme",
        "http://127.0.0.1:9/hook",
        "--secret-stdin",
        "--json",
        *extra,
        "--data-dir",
        str(tmp_path),
    )
    assert code == 0, err
    assert SECRET not in out + err
    return json.loads(out)["id"]


def test_add_list_remove_never_show_the_secret(tmp_path, capsys, monkeypatch):
    hook = add_with_secret(tmp_path, capsys, monkeypatch, "--events", "push,tag")
    code, out, err = run(capsys, "webhook", "list", "--json", "--data-dir", str(tmp_path))
    assert code == 0
    (listed,) = json.loads(out)
    assert listed == {
        "id": hook,
        "namespace": "acme",
        "url": "http://127.0.0.1:9/hook",
        "events": ["push", "tag"],
        "createdAt": listed["createdAt"],
    }
    code, out, err = run(capsys, "webhook", "list", "--data-dir", str(tmp_path))
    assert code == 0 and "http://127.0.0.1:9/hook" in out and SECRET not in out + err
    code, out, err = run(capsys, "webhook", "remove", str(hook), "--data-dir", str(tmp_path))
    assert code == 0 and f"removed webhook {hook}" in err
    code, out, err = run(capsys, "webhook", "list", "--json", "--data-dir", str(tmp_path))
    assert json.loads(out) == []


def test_add_without_a_secret_generates_one_and_prints_it_once(tmp_path, capsys):
    code, out, err = run(capsys, "webhook", "add", "acme", "https://hooks.example.com/x", "--data-dir", str(tmp_path))
    assert code == 0
    secret = out.strip()
    assert len(secret) >= 40 and "cannot be shown again" in err
    assert "FORKD_HUB_WEBHOOK_ALLOW allows no destination" in err
    code, out, err = run(capsys, "webhook", "list", "--json", "--data-dir", str(tmp_path))
    assert secret not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["add", "Acme!", "http://127.0.0.1/"], "invalid namespace"),
        (["add", "acme", "file:///etc/passwd"], "must be http:// or https://"),
        (["add", "acme", "http://127.0.0.1/", "--events", "push,pull"], "unknown webhook event(s) pull"),
        (["remove", "42"], "no webhook with id 42"),
        (["deliveries", "--limit", "0"], "limit must be between"),
    ],
)
def test_bad_requests_exit_1_with_one_line(tmp_path, capsys, argv, message):
    code, _out, err = run(capsys, "webhook", *argv, "--data-dir", str(tmp_path))
    assert code == 1
    assert err.startswith("forkd-hub: error: ") and message in err and "Traceback" not in err


def test_a_delivery_queued_before_a_restart_is_sent_by_the_next_process(tmp_path, capsys, monkeypatch):
    receiver = Receiver()
    try:
        settings = Settings.for_data_dir(tmp_path, storage="memory", **FAST)

        async def queue() -> None:  # a hub process that records a tag move and stops before delivering
            async with open_hub(settings) as hub:
                hook = await hub.webhooks.add("acme", receiver.url, SECRET, ["tag"])
                await hub.audit.record(
                    "ci",
                    "tag",
                    repository="acme/vm",
                    reference="v1",
                    digest="blake3:" + "1" * 64,
                    detail={"previous": None},
                )
                assert hook.id is not None

        asyncio.run(queue())
        code, out, _ = run(capsys, "webhook", "deliveries", "--json", "--data-dir", str(tmp_path))
        assert code == 0
        (pending,) = json.loads(out)
        assert (pending["state"], pending["attempts"]) == ("pending", [])
        assert receiver.received == []

        with TestClient(create_app(settings)):  # the next process resumes it
            (request,) = receiver.wait_for(1)
        assert request.signed_with(SECRET) and request.json["delivery"] == pending["id"]
        assert request.json["tag"] == "v1" and request.json["actor"] == "ci"
        deadline = time.monotonic() + 10
        while True:
            _, out, _ = run(capsys, "webhook", "deliveries", "--json", "--data-dir", str(tmp_path))
            (row,) = json.loads(out)
            if row["state"] != "pending" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert row["state"] == "delivered" and [a["statusCode"] for a in row["attempts"]] == [200]
        (documented,) = examples()["deliveries"]  # docs/webhooks.md shows exactly these keys
        assert set(row) == set(documented) and set(row["attempts"][0]) == set(documented["attempts"][0])
        _code, out, _ = run(capsys, "webhook", "deliveries", "--data-dir", str(tmp_path))
        assert pending["id"] in out and "delivered" in out
    finally:
        receiver.close()


def test_two_deliverers_never_claim_the_same_delivery(tmp_path):
    settings = Settings.for_data_dir(tmp_path, storage="memory", **FAST)

    async def go() -> tuple[int, int]:
        async with open_hub(settings) as one, open_hub(settings) as other:
            await one.webhooks.add("acme", "http://127.0.0.1:9/", SECRET)
            for i in range(5):
                await one.audit.record(
                    "ci", "push", repository="acme/vm", reference=f"blake3:{i:064}", digest=f"blake3:{i:064}"
                )
            first, second = await asyncio.gather(one.deliverer._claim(), other.deliverer._claim())  # noqa: SLF001
            return len(first) + len(second), len({d.id for d, _ in first} | {d.id for d, _ in second})

    claimed, distinct = asyncio.run(go())
    assert claimed == distinct == 5
