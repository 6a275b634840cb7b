"""Webhooks end to end: a real ``forkd-hub serve``, a webhook added with the CLI, ``forkd push``,
and a real receiver that checks every signature."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.e2e.test_push_pull_cli import User, make_sources
from tests.hub_server.webhooks.receiver import Receiver

pytestmark = pytest.mark.slow
SECRET = "e2e-webhook-secret"


@pytest.fixture
def receiver():
    r = Receiver(statuses=[500])  # the first delivery fails once and is retried
    yield r
    r.close()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch, receiver):
    monkeypatch.setenv("FORKD_HUB_WEBHOOK_ALLOW", "127.0.0.1/32")
    monkeypatch.setenv("FORKD_HUB_WEBHOOK_BACKOFF", "200ms")
    monkeypatch.setenv("FORKD_HUB_WEBHOOK_POLL", "100ms")
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0


def hub_cli(hub: HubProcess, *args: str, input: str | None = None) -> str:
    result = subprocess.run(forkd_hub(*args), env=hub.env, input=input, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_forkd_push_to_a_served_hub_delivers_signed_retried_webhooks(hub, receiver, tmp_path):
    hook = json.loads(
        hub_cli(hub, "webhook", "add", "acme", receiver.url, "--secret-stdin", "--json", input=SECRET + "\n")
    )
    assert SECRET not in hub_cli(hub, "webhook", "list", "--json")
    sources = make_sources(tmp_path / "src", data_mib=1)
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice-ci", "push:acme/*") + "\n")
    alice.run("import", str(sources[0]), "base")
    pushed = alice.json("push", "base", "acme/py:v1")

    requests = receiver.wait_for(3)  # push (failed once, then delivered) and tag
    assert all(r.signed_with(SECRET) for r in requests)
    assert requests[0].status == 500
    by_delivery: dict[str, list] = {}
    for r in requests:
        by_delivery.setdefault(r.headers["x-forkd-delivery"], []).append(r)
    events = {rs[0].json["event"]: rs[0].json for rs in by_delivery.values()}
    assert events["push"]["digest"] == events["tag"]["digest"] == pushed["digest"]
    assert events["tag"]["tag"] == "v1" and events["tag"]["previousDigest"] is None
    assert {e["actor"] for e in events.values()} == {"alice-ci"}

    deadline = time.monotonic() + 20
    while True:
        log = json.loads(hub_cli(hub, "webhook", "deliveries", "--webhook", str(hook["id"]), "--json"))
        if all(d["state"] == "delivered" for d in log) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sorted(d["event"] for d in log) == ["push", "tag"]
    assert all(d["state"] == "delivered" for d in log), log
    assert sorted(len(d["attempts"]) for d in log) == [1, 2]
    retried = next(d for d in log if len(d["attempts"]) == 2)
    assert [a["statusCode"] for a in retried["attempts"]] == [500, 200]
