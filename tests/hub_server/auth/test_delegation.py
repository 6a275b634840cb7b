"""hub_server.auth.delegation: a user makes tokens within their own write scopes, never wider (issue 30)."""

from __future__ import annotations

import pytest

from hub_server.auth.delegation import covers, makes_tokens, may_grant, may_manage, namespaces_of, writes_in
from hub_server.auth.scopes import Principal, Scope

LEAD = Principal.with_scopes("lead", ["push:acme/*", "delete:acme/py", "pull:beta/*"])


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        ("acme/*", "acme/py", True),
        ("acme/*", "acme/py-*", True),
        ("acme/*", "acme/*", True),
        ("*/*", "beta/x", True),
        ("acme/py-*", "acme/py-numpy", True),
        ("acme/py-*", "acme/*", False),  # wider
        ("acme/py-*", "acme/py*", False),  # a glob inside a glob: refused (sound, not complete)
        ("acme/py", "acme/py-numpy", False),
        ("acme/*", "acme-x/py", False),
        ("a*/x", "b/x", False),
    ],
)
def test_covers(outer: str, inner: str, expected: bool) -> None:
    assert covers(outer, inner) is expected


def test_a_lead_grants_only_what_their_write_scopes_hold() -> None:
    for granted in ("push:acme/*", "push:acme/py", "pull:acme/*", "delete:acme/py", "pull:acme/py"):
        assert may_grant(LEAD, Scope.parse(granted)), granted
    for refused in ("push:*/*", "delete:acme/*", "pull:beta/*", "push:beta/x", "admin", "push:acme-x/y"):
        assert not may_grant(LEAD, Scope.parse(refused)), refused  # pull on beta is held, but only to read


def test_who_makes_tokens_at_all() -> None:
    reader = Principal.with_scopes("reader", ["pull:*/*"])
    admin = Principal.with_scopes("root", ["admin"])
    registry_token = Principal("lead", LEAD.scopes, grantable=LEAD.scopes)  # /v2/token's short-lived kind
    assert makes_tokens(LEAD) and makes_tokens(admin)
    assert not makes_tokens(reader) and not makes_tokens(Principal.anonymous()) and not makes_tokens(registry_token)
    assert not may_grant(reader, Scope.parse("pull:acme/py")) and not may_grant(
        registry_token, Scope.parse("pull:acme/py")
    )
    assert may_grant(admin, Scope.parse("admin"))


def test_managing_and_namespaces() -> None:
    assert may_manage(LEAD, ["push:acme/py", "pull:acme/*"]) and not may_manage(LEAD, ["push:acme/py", "pull:beta/x"])
    assert not may_manage(LEAD, [])
    assert namespaces_of(["push:acme/*", "pull:team-*/x", "admin"]) == {"acme", "team-*", "*"}
    assert writes_in(LEAD, "acme") and not writes_in(LEAD, "beta") and not writes_in(Principal.anonymous(), "acme")
