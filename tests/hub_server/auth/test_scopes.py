"""Scope parsing, glob matching and the implication rules of docs/http-api.md."""

import pytest

from hub_server.auth.errors import Forbidden, InvalidScope, Unauthorized
from hub_server.auth.scopes import Principal, Scope


@pytest.mark.parametrize(
    "text",
    [
        "pull:acme/*",
        "push:acme/py-base",
        "delete:*/*",
        "admin",
        "pull:a.b_c-d/x.y_z-0",
        "pull:acme/**",
        "push:a*/b*",
    ],
)
def test_valid_scopes_round_trip(text):
    scope = Scope.parse(text)
    assert str(scope) == text
    assert Scope.parse(str(scope)) == scope


def test_parse_splits_action_and_pattern():
    assert Scope.parse("push:acme/*") == Scope("push", "acme/*")
    assert Scope.parse("admin") == Scope("admin", None)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "pull",
        "pull:",
        "pull:acme",  # no '/'
        "pull:a/b/c",  # two '/'
        "pull:/x",
        "pull:x/",
        "pull:Acme/x",  # upper case
        "pull:a b/c",
        "pull:a?/b",
        "pull:[ab]/c",
        "pull:a/b:c",
        " pull:a/b",
        "PULL:a/b",
        "write:a/b",
        "admin:a/b",
        "admin:",
        "pull:acme/x\n",
    ],
)
def test_invalid_scopes_are_rejected_naming_the_scope(text):
    with pytest.raises(InvalidScope) as info:
        Scope.parse(text)
    assert isinstance(info.value, ValueError)
    assert repr(text) in str(info.value)


def test_direct_construction_is_as_strict_as_parse():
    with pytest.raises(InvalidScope):
        Scope("pull", None)
    with pytest.raises(InvalidScope):
        Scope("admin", "a/b")
    with pytest.raises(InvalidScope):
        Scope("pull:acme/*", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidScope):
        Scope("pull", "a/b/c")


@pytest.mark.parametrize(
    ("pattern", "repository", "expected"),
    [
        ("acme/*", "acme/py-base", True),
        ("acme/*", "acme-x/y", False),
        ("acme/*", "acmex/y", False),
        ("acme/*", "xacme/y", False),
        ("acme/*", "acme/x/y", False),  # '*' never crosses '/'
        ("*/*", "anything/goes", True),
        ("*/*", "a/b/c", False),
        ("acme/py-base", "acme/py-base", True),
        ("acme/py-base", "acme/py-base2", False),
        ("acme/py-*", "acme/py-base", True),
        ("acme/py-*", "acme/node", False),
        ("acme/a.c", "acme/abc", False),  # '.' is literal, not a regex wildcard
        ("acme/**", "acme/x", True),  # '**' is just '*' twice
        ("**/x", "a/b/x", False),
        ("a*/b", "a/b", True),
        ("a*/b", "ab/b", True),
        ("a*/b", "ba/b", False),
    ],
)
def test_glob_semantics(pattern, repository, expected):
    assert Scope("pull", pattern).matches(repository) is expected


def test_push_and_delete_imply_pull_on_the_same_pattern_only():
    pusher = Principal.with_scopes("ci", ["push:acme/*"])
    assert pusher.can("push", "acme/a") and pusher.can("pull", "acme/a")
    assert not pusher.can("pull", "other/a")
    assert not pusher.can("delete", "acme/a")
    deleter = Principal.with_scopes("janitor", ["delete:acme/old"])
    assert deleter.can("pull", "acme/old") and deleter.can("delete", "acme/old")
    assert not deleter.can("push", "acme/old")
    assert not deleter.can("pull", "acme/new")


def test_pull_implies_nothing_more():
    reader = Principal.with_scopes("reader", ["pull:*/*"])
    assert reader.can("pull", "a/b")
    assert not reader.can("push", "a/b")
    assert not reader.can("delete", "a/b")
    assert not reader.can("admin", "a/b")
    assert not reader.is_admin


def test_admin_implies_everything():
    admin = Principal.with_scopes("root", ["admin"])
    assert admin.is_admin
    for action in ("pull", "push", "delete", "admin"):
        assert admin.can(action, "any/repo")


def test_scopes_combine():
    p = Principal.with_scopes("mixed", ["pull:*/*", "push:acme/*"])
    assert p.can("pull", "other/x")
    assert p.can("push", "acme/x")
    assert not p.can("push", "other/x")


def test_anonymous_principal_holds_nothing():
    anon = Principal.anonymous()
    assert anon.is_anonymous and anon.name is None and anon.actor == "anonymous"
    assert not anon.is_admin
    assert not anon.can("pull", "a/b")
    assert not Principal.with_scopes("x", ["pull:a/b"]).is_anonymous


def test_require_raises_unauthorized_for_anonymous_and_forbidden_for_tokens():
    with pytest.raises(Unauthorized) as info:
        Principal.anonymous().require("push", "acme/a")
    assert info.value.reason == "required"
    reader = Principal.with_scopes("reader", ["pull:acme/*"])
    reader.require("pull", "acme/a")
    with pytest.raises(Forbidden) as denied:
        reader.require("push", "acme/a")
    assert "reader" in str(denied.value) and "acme/a" in str(denied.value)
    assert denied.value.action == "push" and denied.value.repository == "acme/a"


def test_require_without_a_repository_needs_admin():
    Principal.with_scopes("root", ["admin"]).require("admin")
    with pytest.raises(Forbidden, match="admin rights"):
        Principal.with_scopes("ci", ["push:*/*"]).require("admin")
    with pytest.raises(Unauthorized):
        Principal.anonymous().require("admin")
    with pytest.raises(Forbidden):
        Principal.with_scopes("ci", ["delete:*/*"]).require("delete")
