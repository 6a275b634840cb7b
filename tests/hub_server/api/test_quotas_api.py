"""``/api/v1/namespaces/{ns}/quota``: who may see and change a namespace's storage quota, and what it says."""

from __future__ import annotations

from tests.hub_server.pushing import auth, expect_error
from tests.hub_server.registry.push.test_oci_content import upload


def test_quota_over_http(hub):
    admin = hub.token("admin", "admin")
    pusher = hub.token("ci", "push:acme/*")
    reader = hub.token("reader", "pull:acme/*")
    upload(hub, pusher, "acme/a", b"{}")
    r = hub.client.get("/api/v1/namespaces/acme/quota", headers=auth(pusher))
    assert r.json() == {"namespace": "acme", "quotaBytes": None, "usedBytes": 2, "source": "none"}
    expect_error(hub.client.get("/api/v1/namespaces/acme/quota", headers=auth(reader)), 403, "DENIED")
    expect_error(hub.client.get("/api/v1/namespaces/acme/quota"), 401, "UNAUTHORIZED")
    expect_error(
        hub.client.put("/api/v1/namespaces/acme/quota", json={"quotaBytes": 10}, headers=auth(pusher)), 403, "DENIED"
    )
    r = hub.client.put("/api/v1/namespaces/acme/quota", json={"quotaBytes": 10}, headers=auth(admin))
    assert r.status_code == 200 and r.json()["quotaBytes"] == 10 and r.json()["source"] == "namespace"
    assert expect_error(
        hub.client.put("/api/v1/namespaces/acme/quota", json={"quotaBytes": -7}, headers=auth(admin)),
        400,
        "INVALID_REQUEST",
    ) == {"field": "quotaBytes"}
    expect_error(hub.client.get("/api/v1/namespaces/Bad!/quota", headers=auth(admin)), 400, "NAME_INVALID")
