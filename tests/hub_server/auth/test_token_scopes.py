"""Docker token scopes: parsing what clients ask for, granting no more than the API token holds."""

from hub_server.auth.scopes import Principal
from hub_server.auth.token_scopes import TokenScope, grant, parse_token_scopes


def test_parses_repeated_and_space_separated_scopes():
    scopes = parse_token_scopes(["repository:acme/app:pull,push", "repository:a/b:pull registry:catalog:*"])
    assert scopes == [
        TokenScope("repository", "acme/app", ("pull", "push")),
        TokenScope("repository", "a/b", ("pull",)),
        TokenScope("registry", "catalog", ("*",)),
    ]


def test_plugin_class_is_read_as_repository_and_malformed_scopes_are_skipped():
    assert parse_token_scopes(["repository(plugin):a/b:pull", "nonsense", "repository::pull", ":x:y"]) == [
        TokenScope("repository", "a/b", ("pull",)),
        TokenScope("", "x", ("y",)),
    ]


def test_grant_keeps_only_what_the_token_allows():
    principal = Principal.with_scopes("ci", ["push:acme/*", "pull:other/app"])
    asked = parse_token_scopes(
        ["repository:acme/app:pull,push,delete", "repository:other/app:pull,push", "repository:third/x:pull"]
    )
    assert grant(principal, asked) == ["pull:acme/app", "push:acme/app", "pull:other/app"]


def test_star_asks_for_everything_the_token_has_on_the_repository():
    principal = Principal.with_scopes("ops", ["delete:acme/*", "pull:acme/*"])
    assert grant(principal, parse_token_scopes(["repository:acme/app:*"])) == ["pull:acme/app", "delete:acme/app"]


def test_admin_gets_what_it_asks_for_and_the_catalog_everything_readable():
    admin = Principal.with_scopes("root", ["admin"])
    assert grant(admin, parse_token_scopes(["repository:acme/app:pull,push"])) == ["pull:acme/app", "push:acme/app"]
    assert grant(admin, parse_token_scopes(["registry:catalog:*"])) == ["pull:*/*"]
    reader = Principal.with_scopes("r", ["push:acme/*", "pull:x/y"])
    assert grant(reader, parse_token_scopes(["registry:catalog:*"])) == ["pull:acme/*", "pull:x/y"]


def test_names_outside_our_grammar_and_anonymous_callers_get_nothing():
    admin = Principal.with_scopes("root", ["admin"])
    assert (
        grant(
            admin,
            parse_token_scopes(
                ["repository:a/b/c:pull", "repository:A/b:pull", "repository:ab:pull", "repository:a/*:pull"]
            ),
        )
        == []
    )
    assert grant(Principal.anonymous(), parse_token_scopes(["repository:acme/app:pull"])) == []
