"""``/api/v1/namespaces/{ns}/webhooks`` through the real app: admin only, secrets never returned."""

from __future__ import annotations

from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, expect_error
from tests.hub_server.webhooks.conftest import FAST, make_receiver  # noqa: F401 - the fixture
from tests.hub_server.webhooks.receiver import Receiver

SECRET = "api-secret-value"


def test_admin_adds_lists_reads_the_log_and_removes(make_hub, make_receiver, images, tmp_path):  # noqa: F811
    hub: Hub = make_hub(**FAST)
    admin = auth(hub.token("admin", "admin"))
    receiver: Receiver = make_receiver()
    r = hub.client.post(
        "/api/v1/namespaces/acme/webhooks",
        json={"url": receiver.url, "secret": SECRET, "events": ["push"]},
        headers=admin,
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert SECRET not in r.text and created["events"] == ["push"] and created["namespace"] == "acme"
    listed = hub.client.get("/api/v1/namespaces/acme/webhooks", headers=admin)
    assert listed.json() == [created] and SECRET not in listed.text
    assert hub.client.get("/api/v1/namespaces/other/webhooks", headers=admin).json() == []

    pusher = hub.pusher(hub.token("ci", "push:acme/*"))
    pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"))
    (request,) = receiver.wait_for(1)
    assert request.signed_with(SECRET)
    log = hub.client.get(f"/api/v1/namespaces/acme/webhooks/{created['id']}/deliveries", headers=admin).json()
    assert [d["id"] for d in log] == [request.json["delivery"]]

    expect_error(
        hub.client.delete(f"/api/v1/namespaces/other/webhooks/{created['id']}", headers=admin), 404, "NOT_FOUND"
    )
    assert hub.client.delete(f"/api/v1/namespaces/acme/webhooks/{created['id']}", headers=admin).status_code == 204
    assert hub.client.get("/api/v1/namespaces/acme/webhooks", headers=admin).json() == []
    actions = [e["action"] for e in hub.call(hub.client.app.state.audit.query, actor="admin")]
    assert actions[:2] == ["webhook.remove", "webhook.add"]


def test_only_admin_tokens_manage_webhooks(hub: Hub):
    pusher = auth(hub.token("ci", "push:acme/*", "delete:acme/*"))
    expect_error(hub.client.get("/api/v1/namespaces/acme/webhooks", headers=pusher), 403, "DENIED")
    expect_error(
        hub.client.post(
            "/api/v1/namespaces/acme/webhooks", json={"url": "http://127.0.0.1/", "secret": "x"}, headers=pusher
        ),
        403,
        "DENIED",
    )
    expect_error(hub.client.get("/api/v1/namespaces/acme/webhooks"), 401, "UNAUTHORIZED")


def test_bad_webhooks_are_invalid_requests(hub: Hub):
    admin = auth(hub.token("admin", "admin"))
    for body, message in [
        ({"url": "gopher://x/", "secret": "s"}, "must be http:// or https://"),
        ({"url": "http://127.0.0.1/", "secret": ""}, "secret"),
        ({"url": "http://127.0.0.1/", "secret": "s", "events": ["pull"]}, "unknown webhook event"),
    ]:
        r = hub.client.post("/api/v1/namespaces/acme/webhooks", json=body, headers=admin)
        expect_error(r, 400, "INVALID_REQUEST")
        assert message in r.json()["errors"][0]["message"]
    expect_error(
        hub.client.post("/api/v1/namespaces/acme/webhooks", json={"secret": "s"}, headers=admin), 400, "INVALID_REQUEST"
    )


def test_a_webhook_body_is_read_only_after_authorization_and_deep_json_is_refused(hub: Hub):
    """Issue 16 items 5 and 7 on this route too: no body is parsed before the caller is known to be
    admin, and a deeply nested one is a typed 400 naming the body, not a 500."""
    deep = b"[" * 100_000 + b"]" * 100_000
    headers = {"Content-Type": "application/json"}
    expect_error(
        hub.client.post("/api/v1/namespaces/acme/webhooks", content=deep, headers=headers), 401, "UNAUTHORIZED"
    )
    pusher = auth(hub.token("ci", "push:acme/*"))
    expect_error(
        hub.client.post("/api/v1/namespaces/acme/webhooks", content=deep, headers={**headers, **pusher}), 403, "DENIED"
    )
    admin = auth(hub.token("admin", "admin"))
    r = hub.client.post("/api/v1/namespaces/acme/webhooks", content=deep, headers={**headers, **admin})
    expect_error(r, 400, "INVALID_REQUEST")
    assert r.json()["errors"][0]["message"].startswith("webhook: ")  # decoded as the route's type, stopped at once


def test_a_webhook_url_with_spaces_or_control_characters_is_refused_and_not_stored(hub: Hub):
    """Issue 27, item 8: such a URL used to be stored (201) and then failed every delivery."""
    admin = auth(hub.token("root", "admin"))
    for url in ("http://127.0.0.1:9/a b", "http://127.0.0.1:9/\x1b[2J", "http://127.0.0.1:9/x\r\nHost: evil"):
        detail = expect_error(
            hub.client.post("/api/v1/namespaces/acme/webhooks", json={"url": url, "secret": "s"}, headers=admin),
            400,
            "INVALID_REQUEST",
        )
        assert detail is not None
    assert hub.client.get("/api/v1/namespaces/acme/webhooks", headers=admin).json() == []
