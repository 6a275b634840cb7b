"""Sign-in, the session cookie and CSRF protection."""

from __future__ import annotations

import re

from litestar.testing import TestClient

from tests.hub_server.conftest import Hub

PRIVATE = "/r/beta/secret"


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)


def sign_in(client: TestClient, token: str):  # noqa: ANN201
    form = client.get("/signin?next=" + PRIVATE)
    return client.post(
        "/signin", data={"token": token, "csrf": csrf_of(form.text), "next": PRIVATE}, follow_redirects=False
    )


def test_sign_in_sets_a_sealed_http_only_cookie_and_sign_out_clears_it(hub: Hub, catalog) -> None:
    token = hub.token("reader", "pull:beta/*")
    assert hub.client.get(PRIVATE).status_code == 404
    r = sign_in(hub.client, token)
    assert r.status_code == 303 and r.headers["location"] == PRIVATE
    cookie = next(h for h in r.headers.get_list("set-cookie") if h.startswith("forkd_session="))
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax") and "Max-Age=43200" in cookie
    assert "Secure" not in cookie  # plain http here; https below
    assert token not in cookie  # sealed, not the token itself
    page = hub.client.get(PRIVATE)
    assert page.status_code == 200 and "reader" in page.text
    r = hub.client.post("/signout", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert r.status_code == 303
    assert hub.client.get(PRIVATE).status_code == 404


def test_csrf_is_required_and_checked(hub: Hub, catalog) -> None:
    token = hub.token("reader", "pull:beta/*")
    form = hub.client.get("/signin")
    assert hub.client.post("/signin", data={"token": token}).status_code == 403
    assert hub.client.post("/signin", data={"token": token, "csrf": "0" * 64}).status_code == 403
    cross = hub.client.post(
        "/signin", data={"token": token, "csrf": csrf_of(form.text)}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    other = TestClient(hub.client.app, base_url=str(hub.client.base_url))  # another browser: other nonce
    with other:
        other.get("/signin")
        assert other.post("/signin", data={"token": token, "csrf": csrf_of(form.text)}).status_code == 403
    assert hub.client.get(PRIVATE).status_code == 404  # nothing of the above signed anyone in


def test_bad_tokens_tampered_cookies_and_revocation(hub: Hub, catalog) -> None:
    r = sign_in(hub.client, "fkd_" + "x" * 43)
    assert r.status_code == 400 and "that token was not accepted (unknown)" in r.text
    token = hub.token("reader", "pull:beta/*")
    assert sign_in(hub.client, token).status_code == 303
    sealed = hub.client.cookies["forkd_session"]
    hub.client.cookies.set("forkd_session", sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB"))
    assert hub.client.get(PRIVATE).status_code == 404  # tampered: anonymous
    hub.client.cookies.set("forkd_session", sealed)
    assert hub.client.get(PRIVATE).status_code == 200
    hub.call(hub.client.app.state.tokens.revoke, "reader")
    assert hub.client.get(PRIVATE).status_code == 404  # revoked token: the session ends at once


def test_open_redirects_are_refused(hub: Hub, catalog) -> None:
    token = hub.token("reader", "pull:beta/*")
    for target in ["//evil.example/", "https://evil.example/", "/\\evil.example"]:
        hub.client.cookies.clear()
        form = hub.client.get("/signin")
        r = hub.client.post(
            "/signin", data={"token": token, "csrf": csrf_of(form.text), "next": target}, follow_redirects=False
        )
        assert r.headers["location"] == "/"


def test_cookie_is_secure_over_https(hub: Hub, catalog) -> None:
    token = hub.token("reader", "pull:beta/*")
    with TestClient(hub.client.app, base_url="https://hub.example") as client:
        r = sign_in(client, token)
        cookie = next(h for h in r.headers.get_list("set-cookie") if h.startswith("forkd_session="))
        assert "Secure" in cookie


def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(hub: Hub, catalog) -> None:
    """Issue 27, item 7: a copied ``forkd_session`` cookie used to keep reading private pages after
    ``POST /signout``, until its 12 h lifetime ended. (One client, its cookie swapped: a second
    TestClient of the same app would run on another event loop, which PostgreSQL's pool refuses.)"""
    token = hub.token("reader", "pull:beta/*")
    sign_in(hub.client, token)
    copied = hub.client.cookies.get("forkd_session")  # what a thief copies
    hub.client.cookies.delete("forkd_session")
    sign_in(hub.client, token)  # the same token signed in on a laptop: another session
    laptop = hub.client.cookies.get("forkd_session")
    assert copied != laptop

    def as_session(cookie: str) -> None:
        hub.client.cookies.delete("forkd_session")
        hub.client.cookies.set("forkd_session", cookie)

    as_session(copied)
    page = hub.client.get(PRIVATE)
    assert page.status_code == 200
    assert hub.client.post("/signout", data={"csrf": csrf_of(page.text)}, follow_redirects=False).status_code == 303
    as_session(copied)  # the thief's copy, after its owner signed out
    assert hub.client.get(PRIVATE).status_code == 404
    assert "reader" not in hub.client.get("/").text
    as_session(laptop)  # signing out ended one session, not the token's others
    assert hub.client.get(PRIVATE).status_code == 200


def test_a_cookie_sealed_without_a_session_id_is_refused(hub: Hub, catalog) -> None:
    """Cookies sealed before sessions had ids could never be signed out: they are not accepted."""
    import json

    from web.session import load_keys

    token = hub.token("reader", "pull:beta/*")
    keys = load_keys(hub.settings.data_dir)
    hub.client.cookies.set("forkd_session", keys.seal.encrypt(json.dumps({"token": token}).encode()).decode())
    assert hub.client.get(PRIVATE).status_code == 404


def test_the_namespace_page_shows_its_storage_quota_to_those_who_may_push(hub: Hub, catalog) -> None:
    assert "Storage:" not in hub.client.get("/n/acme").text  # anonymous: not shown
    hub.call(hub.registry.quotas.set, "acme", 10 << 30)
    assert sign_in(hub.client, hub.token("ci", "push:acme/*")).status_code == 303
    page = hub.client.get("/n/acme").text
    assert re.search(r"Storage: [0-9.]+ [KMG]i?B of 10(\.0)? GiB quota", page), page[:2000]
    assert hub.client.post("/signout", data={"csrf": csrf_of(page)}, follow_redirects=False).status_code == 303
    assert sign_in(hub.client, hub.token("reader", "pull:acme/*")).status_code == 303
    assert "Storage:" not in hub.client.get("/n/acme").text
