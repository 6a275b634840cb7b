"""``/api/v1/me``, ``/api/v1/tokens`` and ``/api/v1/namespaces/{ns}/audit`` (issue 30): a user manages the robot
tokens of their own namespaces, never wider than their own token, and reads their namespaces' audit log."""

from __future__ import annotations

from datetime import timedelta

from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth


def test_me_says_who_a_token_is(hub: Hub) -> None:
    lead = hub.token("lead", "push:acme/*", expires=timedelta(days=10))
    me = hub.client.get("/api/v1/me", headers=auth(lead)).json()
    assert me["name"] == "lead" and me["scopes"] == ["push:acme/*"] and me["managesTokens"] is True
    assert me["expiresAt"] is not None
    reader = hub.token("reader", "pull:acme/*")
    assert hub.client.get("/api/v1/me", headers=auth(reader)).json()["managesTokens"] is False
    assert hub.client.get("/api/v1/me").status_code == 401


def test_a_lead_makes_lists_and_revokes_robot_tokens_within_their_scope(make_hub) -> None:
    hub = make_hub(cache_ttl=0)  # a revoked token is refused at once (no accepted-token cache)
    lead = hub.token("lead", "push:acme/*", expires=timedelta(days=10))
    hub.token("other-team", "push:beta/*")
    made = hub.client.post(
        "/api/v1/tokens", json={"name": "ci", "scopes": ["push:acme/py", "pull:acme/*"]}, headers=auth(lead)
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["token"].startswith("fkd_") and body["scopes"] == ["push:acme/py", "pull:acme/*"]
    assert body["expires_at"] <= hub.client.get("/api/v1/me", headers=auth(lead)).json()["expiresAt"]  # never outlives
    ci = body["token"]
    assert hub.client.get("/api/v1/me", headers=auth(ci)).json()["name"] == "ci"  # it works

    wider = hub.client.post("/api/v1/tokens", json={"name": "x", "scopes": ["push:*/*"]}, headers=auth(lead))
    assert wider.status_code == 403 and "cannot grant push:*/*" in wider.json()["errors"][0]["message"]
    admin = hub.client.post("/api/v1/tokens", json={"name": "x", "scopes": ["admin"]}, headers=auth(lead))
    assert admin.status_code == 403
    taken = hub.client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["pull:acme/py"]}, headers=auth(lead))
    assert taken.status_code == 400 and taken.json()["errors"][0]["detail"]["field"] == "name"
    bad = hub.client.post("/api/v1/tokens", json={"name": "y", "scopes": ["pull:acme"]}, headers=auth(lead))
    assert bad.status_code == 400 and bad.json()["errors"][0]["detail"]["field"] == "scopes"
    assert hub.client.post("/api/v1/tokens", json={"name": "z", "scopes": ["pull:acme/x"]}).status_code == 401

    names = [t["name"] for t in hub.client.get("/api/v1/tokens", headers=auth(lead)).json()]
    assert names == ["lead", "ci"]  # not other-team's: lead could not have made it
    assert [t["name"] for t in hub.client.get("/api/v1/tokens?namespace=beta", headers=auth(lead)).json()] == []
    assert hub.client.delete("/api/v1/tokens/other-team", headers=auth(lead)).status_code == 404  # not theirs
    revoked = hub.client.delete("/api/v1/tokens/ci", headers=auth(lead))
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert hub.client.get("/api/v1/me", headers=auth(ci)).status_code == 401

    reader = hub.token("reader", "pull:acme/*")
    refused = hub.client.post("/api/v1/tokens", json={"name": "r2", "scopes": ["pull:acme/py"]}, headers=auth(reader))
    assert refused.status_code == 403  # a pull-only token makes nothing


def test_a_namespace_audit_log_for_its_members(hub: Hub, images, tmp_path) -> None:
    lead = hub.token("lead", "push:acme/*")
    hub.pusher(lead).push_chain("acme/py", images[:1], tmp_path / "p", "v1")
    hub.pusher(hub.token("beta", "push:beta/*")).push_chain("beta/x", images[:1], tmp_path / "b", "v1")
    made = hub.client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["pull:acme/py"]}, headers=auth(lead))
    assert made.status_code == 201
    page = hub.client.get("/api/v1/namespaces/acme/audit", headers=auth(lead)).json()
    actions = [(e["action"], e["repository"]) for e in page["events"]]
    assert actions[0] == ("token.create", None) and ("push", "acme/py") in actions and ("tag", "acme/py") in actions
    assert all(r in (None, "acme/py") for _, r in actions)  # nothing of beta
    first = hub.client.get("/api/v1/namespaces/acme/audit?limit=1", headers=auth(lead)).json()
    older = hub.client.get(f"/api/v1/namespaces/acme/audit?limit=1&before={first['nextBefore']}", headers=auth(lead))
    assert older.json()["events"][0]["id"] < first["events"][0]["id"]
    reader = hub.token("reader", "pull:acme/*")
    assert hub.client.get("/api/v1/namespaces/acme/audit", headers=auth(reader)).status_code == 403
    assert hub.client.get("/api/v1/namespaces/acme/audit").status_code == 401
    assert hub.client.get("/api/v1/namespaces/beta/audit", headers=auth(lead)).status_code == 403
