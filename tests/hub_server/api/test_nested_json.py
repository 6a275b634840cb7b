"""Issue 16 item 5: deeply nested JSON is a 400 naming the problem, never a 500 (and never parsed before auth)."""

from __future__ import annotations

import pytest

from manifest import mediatypes as mt
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth

DEEP = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
DEEP_LIST = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("body", [DEEP, DEEP_LIST], ids=["objects", "lists"])
def test_deep_manifest_is_manifest_invalid(hub: Hub, admin_token: str, body: bytes) -> None:
    r = hub.client.put(
        "/v2/acme/vm/manifests/v1", content=body, headers={**auth(admin_token), "Content-Type": mt.OCI_MANIFEST}
    )
    assert r.status_code == 400, r.text
    error = r.json()["errors"][0]
    assert error["code"] == "MANIFEST_INVALID"
    assert "nested" in error["message"]


def test_deep_frame_query_is_refused_after_authentication(hub: Hub, admin_token: str) -> None:
    body = b'{"digests":' + DEEP_LIST + b"}"
    anonymous = hub.client.post(
        "/api/v1/repositories/acme/vm/frames/query", content=body, headers={"Content-Type": "application/json"}
    )
    assert anonymous.status_code == 401, anonymous.text
    bad_token = hub.client.post(
        "/api/v1/repositories/acme/vm/frames/query",
        content=body,
        headers={**auth("fkd_bogus"), "Content-Type": "application/json"},
    )
    assert bad_token.status_code == 401, bad_token.text
    r = hub.client.post(
        "/api/v1/repositories/acme/vm/frames/query",
        content=body,
        headers={**auth(admin_token), "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    error = r.json()["errors"][0]
    assert error["code"] == "INVALID_REQUEST"
    assert error["message"].startswith("frame query: "), error  # typed decoding names the first wrong field


def test_deep_repository_patch_is_invalid_request(hub: Hub, admin_token: str) -> None:
    body = b'{"description":' + DEEP_LIST + b"}"
    r = hub.client.patch(
        "/api/v1/repositories/acme/vm", content=body, headers={**auth(admin_token), "Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert r.json()["errors"][0]["code"] == "INVALID_REQUEST"
