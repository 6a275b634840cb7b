"""Webhooks through the real app: signed deliveries to a real receiver, retries, the log, the guard."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hub_server.webhooks.service import WebhookService
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth
from tests.hub_server.webhooks.receiver import Receiver

SECRET = "s3cret-for-tests"


def webhooks(hub: Hub) -> WebhookService:
    return hub.client.app.state.hub.webhooks


def add(hub: Hub, url: str, namespace: str = "acme", events: list[str] | None = None) -> int:
    return hub.call(webhooks(hub).add, namespace, url, SECRET, events).id


def log_when(hub: Hub, done, timeout: float = 20) -> list[dict[str, Any]]:  # noqa: ANN001
    """The delivery log once ``done(log)`` holds (AssertionError with the log after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = hub.call(webhooks(hub).deliveries)
        if done(rows):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"delivery log never reached the expected state: {rows}")
        time.sleep(0.05)


def settled(rows: list[dict[str, Any]]) -> bool:
    return bool(rows) and all(r["state"] != "pending" for r in rows)


@pytest.fixture
def pusher(hooked_hub: Hub):
    return hooked_hub.pusher(hooked_hub.token("ci-robot", "push:acme/*", "delete:acme/*"))


def test_push_and_tag_are_delivered_signed_with_the_payload(hooked_hub, make_receiver, pusher, images, tmp_path):
    receiver: Receiver = make_receiver()
    add(hooked_hub, receiver.url)
    add(hooked_hub, receiver.url, namespace="other")  # another namespace's webhook hears nothing
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "l0")
    pusher.push_layer("acme/vm", layer, "v1")

    got = {r.json["event"]: r for r in receiver.wait_for(2)}
    assert set(got) == {"push", "tag"}
    for event, request in got.items():
        assert request.signed_with(SECRET)
        assert not request.signed_with(SECRET + "x")
        assert request.headers["x-forkd-event"] == event
        assert request.headers["x-forkd-delivery"] == request.json["delivery"]
        assert request.headers["content-type"] == "application/json"
        assert request.path == "/hook"
    push, tag = got["push"].json, got["tag"].json
    assert push["repository"] == "acme/vm" and push["namespace"] == "acme"
    assert push["digest"] == layer.digest and push["tag"] is None and push["actor"] == "ci-robot"
    assert tag["tag"] == "v1" and tag["digest"] == layer.digest and tag["previousDigest"] is None
    rows = log_when(hooked_hub, settled)
    assert sorted(r["event"] for r in rows) == ["push", "tag"]
    for row in rows:
        assert row["state"] == "delivered"
        assert [(a["attempt"], a["statusCode"], a["error"]) for a in row["attempts"]] == [(1, 200, None)]
        assert row["attempts"][0]["durationMs"] >= 0
    time.sleep(0.3)
    assert len(receiver.received) == 2  # delivered once each, never again


def test_a_tag_move_carries_the_previous_digest_and_a_repush_sends_nothing(
    hooked_hub, make_receiver, pusher, images, tmp_path
):
    first = pusher.build_layer("acme/vm", *images[0], tmp_path / "l0")
    second = pusher.build_layer("acme/vm", *images[1], tmp_path / "l1")
    pusher.push_layer("acme/vm", first, "latest")
    receiver = make_receiver()
    add(hooked_hub, receiver.url, events=["tag"])
    pusher.push_layer("acme/vm", second, "latest")
    pusher.push_layer("acme/vm", second, "latest")  # the tag already names it: no event
    (moved,) = receiver.wait_for(1)
    assert moved.json["event"] == "tag"
    assert (moved.json["digest"], moved.json["previousDigest"]) == (second.digest, first.digest)
    time.sleep(0.5)
    assert len(receiver.received) == 1


def test_deletes_are_delivered(hooked_hub, make_receiver, pusher, images, tmp_path):
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "l0")
    pusher.push_layer("acme/vm", layer, "a")
    pusher.put_manifest("acme/vm", "b", layer.manifest)
    receiver = make_receiver()
    add(hooked_hub, receiver.url, events=["delete"])
    token = pusher.headers
    assert hooked_hub.client.delete("/v2/acme/vm/manifests/a", headers=token).status_code == 202
    assert hooked_hub.client.delete(f"/v2/acme/vm/manifests/{layer.digest}", headers=token).status_code == 202
    untag, remove = (r.json for r in receiver.wait_for(2))
    assert untag["event"] == remove["event"] == "delete"
    assert (untag["tags"], untag["digest"], untag["manifestRemoved"]) == (["a"], layer.digest, False)
    assert (remove["tags"], remove["digest"], remove["manifestRemoved"]) == (["b"], layer.digest, True)


def test_a_500_is_retried_with_the_same_body_then_succeeds(hooked_hub, make_receiver, pusher, images, tmp_path):
    receiver = make_receiver(statuses=[500, 503])
    add(hooked_hub, receiver.url, events=["push"])
    pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"))
    first, second, third = receiver.wait_for(3)
    assert first.body == second.body == third.body
    assert first.headers["x-forkd-delivery"] == third.headers["x-forkd-delivery"]
    assert all(r.signed_with(SECRET) for r in (first, second, third))
    (row,) = log_when(hooked_hub, settled)
    assert row["state"] == "delivered"
    assert [(a["attempt"], a["statusCode"], a["error"]) for a in row["attempts"]] == [
        (1, 500, "HTTP 500"),
        (2, 503, "HTTP 503"),
        (3, 200, None),
    ]


def test_deliveries_give_up_after_the_last_attempt(make_hub, make_receiver, images, tmp_path):
    from tests.hub_server.webhooks.conftest import FAST

    hub = make_hub(**{**FAST, "webhook_attempts": 2})
    pusher = hub.pusher(hub.token("ci", "push:acme/*"))
    receiver = make_receiver(default=500)
    add(hub, receiver.url, events=["push"])
    pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"))
    (row,) = log_when(hub, settled)
    assert row["state"] == "failed"
    assert [a["statusCode"] for a in row["attempts"]] == [500, 500]
    time.sleep(0.5)
    assert len(receiver.received) == 2


def test_redirects_are_not_followed(hooked_hub, make_receiver, pusher, images, tmp_path):
    receiver = make_receiver(statuses=[302], default=200)
    add(hooked_hub, receiver.url, events=["push"])
    pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"))
    (row,) = log_when(hooked_hub, settled)
    assert row["attempts"][0]["statusCode"] == 302
    assert "redirects are not followed" in row["attempts"][0]["error"]
    assert [r.status for r in receiver.received] == [302, 200]  # retried at the URL, never at Location


def test_a_receiver_that_is_down_never_fails_the_push(hooked_hub, make_receiver, pusher, images, tmp_path):
    receiver = make_receiver()
    url = receiver.url
    receiver.close()  # nothing listens there now
    add(hooked_hub, url, events=["push"])
    response = pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"))
    assert response.status_code == 201
    (row,) = log_when(hooked_hub, lambda rows: rows and len(rows[0]["attempts"]) >= 2)
    assert row["attempts"][0]["statusCode"] is None
    assert "ConnectError" in row["attempts"][0]["error"]


@pytest.mark.parametrize(
    ("host", "allow"),
    [
        ("127.0.0.2", "127.0.0.1/32"),  # an address outside the list
        ("localhost", "10.0.0.0/8"),  # a name resolving outside the list
        ("127.0.0.1", ""),  # the default: nothing allowed
    ],
)
def test_a_disallowed_destination_is_never_contacted_and_logged_refused(
    make_hub, make_receiver, images, tmp_path, host, allow
):
    from tests.hub_server.webhooks.conftest import FAST

    hub = make_hub(**{**FAST, "webhook_allow": allow})
    receiver = make_receiver(host="127.0.0.2" if host == "127.0.0.2" else "127.0.0.1")
    add(hub, f"http://{host}:{receiver.port}/hook")
    pusher = hub.pusher(hub.token("ci", "push:acme/*"))
    response = pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"), "v1")
    assert response.status_code == 201
    rows = log_when(hub, lambda rows: len(rows) == 2 and settled(rows))
    for row in rows:
        assert row["state"] == "refused"
        (attempt,) = row["attempts"]
        assert attempt["statusCode"] is None
        assert attempt["error"].startswith("refused: ") and "FORKD_HUB_WEBHOOK_ALLOW" in attempt["error"]
    time.sleep(0.3)
    assert receiver.received == []


def test_a_listed_host_name_is_delivered_to(make_hub, make_receiver, images, tmp_path):
    from tests.hub_server.webhooks.conftest import FAST

    hub = make_hub(**{**FAST, "webhook_allow": "localhost"})
    receiver = make_receiver()
    add(hub, f"http://localhost:{receiver.port}/hook", events=["push"])
    pusher = hub.pusher(hub.token("ci", "push:acme/*"))
    pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"))
    (request,) = receiver.wait_for(1)
    assert request.headers["host"] == f"localhost:{receiver.port}"
    assert request.signed_with(SECRET)


def test_refused_pushes_send_nothing(hooked_hub, make_receiver, pusher, images, tmp_path):
    receiver = make_receiver()
    add(hooked_hub, receiver.url)
    layer = pusher.build_layer("acme/vm", *images[0], tmp_path / "l0")
    r = hooked_hub.client.put(
        f"/v2/acme/vm/manifests/{layer.digest}",
        content=layer.manifest,
        headers={
            **auth(hooked_hub.token("reader", "pull:acme/*")),
            "Content-Type": "application/vnd.oci.image.manifest.v1+json",
        },
    )
    assert r.status_code == 403
    time.sleep(0.3)
    assert receiver.received == [] and hooked_hub.call(webhooks(hooked_hub).deliveries) == []
