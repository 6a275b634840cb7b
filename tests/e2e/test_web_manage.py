"""Issue 30 "Manage from the browser": a signed-in user with push edits a repository's visibility, description
and README and deletes a tag, in Debian's Chromium at 1280 px and 390 px against a real hub process; the forms
are CSRF-protected like sign-in, and a session without the scope gets the API's refusal as a page."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.test_web_browser import CHROMIUM, _shot, browser, served  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def _sign_in(page, token: str, target: str) -> None:  # noqa: ANN001
    page.goto(f"/signin?next={target}")
    page.fill("#token", token)
    page.click("form.signin button[type=submit]")
    page.wait_for_url(f"**{target}")


def test_a_maintainer_edits_a_repository_and_deletes_a_tag(served, browser) -> None:  # noqa: F811
    process, _, reader = served
    lead = process.token("lead-web", "push:acme/*", "delete:acme/*")
    for viewport, suffix in ((DESKTOP, "desktop"), (PHONE, "phone")):
        context = browser.new_context(viewport=viewport, base_url=process.url)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))  # noqa: B023
        page.goto("/r/acme/py-numpy/settings")
        assert page.locator("h1").inner_text() != "Settings of acme/py-numpy"  # anonymous: refused
        assert page.locator("form.settings").count() == 0
        _sign_in(page, lead, "/r/acme/py-numpy")
        page.click("p.manage a:has-text('Settings')")
        page.wait_for_url("**/r/acme/py-numpy/settings")
        assert page.locator("h1").inner_text() == "Settings of acme/py-numpy"
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        page.fill("#s-description", f"# NumPy ({suffix})\n\nEdited **in the browser**.")
        page.fill("#s-readme", "## Use\n\n`forkd pull acme/py-numpy:1.26`")
        page.check("input[name=visibility][value=private]")
        _shot(page, f"settings-{suffix}")
        page.click("form.settings button[type=submit]")
        page.wait_for_url("**/r/acme/py-numpy/settings?saved=settings")
        assert page.locator("p.notice").inner_text() == "Saved."
        page.goto("/r/acme/py-numpy")
        assert page.locator("section.description strong").inner_text() == "in the browser"  # rendered Markdown
        assert page.locator("h1 .badge.private").is_visible()
        assert page.locator("section.readme code").inner_text() == "forkd pull acme/py-numpy:1.26"
        with httpx.Client(base_url=process.url) as anonymous:
            assert anonymous.get("/r/acme/py-numpy").status_code == 404  # private now
        page.goto("/r/acme/py-numpy/settings")
        page.check("input[name=visibility][value=public]")
        page.click("form.settings button[type=submit]")
        page.wait_for_url("**/r/acme/py-numpy/settings?saved=settings")
        assert errors == []
        context.close()

    context = browser.new_context(viewport=DESKTOP, base_url=process.url)
    page = context.new_page()
    _sign_in(page, lead, "/r/acme/py-pandas/settings")
    page.click("button[aria-label='Delete tag 2.2']")
    page.wait_for_url("**/r/acme/py-pandas/settings?saved=deleted")
    assert page.locator("p.notice").inner_text() == "Tag deleted."
    assert page.locator("button[aria-label='Delete tag 2.2']").count() == 0
    with httpx.Client(base_url=process.url) as anonymous:
        assert anonymous.get("/v2/acme/py-pandas/manifests/2.2").status_code in (401, 404)

    # the form without its CSRF token, with the browser's own cookies: refused, nothing changed
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    with httpx.Client(base_url=process.url, cookies=cookies) as forged:
        refused = forged.post("/r/acme/py-numpy/settings", data={"visibility": "private", "description": "x"})
        assert refused.status_code == 403
    assert "Edited" in httpx.get(f"{process.url}/api/v1/repositories/acme/py-numpy").json()["description"]
    context.close()

    context = browser.new_context(viewport=DESKTOP, base_url=process.url)
    page = context.new_page()
    _sign_in(page, reader, "/")
    response = page.goto("/r/beta/secret/settings")  # a pull-only session: the API's 403, as a page
    assert response is not None and response.status == 403
    assert page.locator("form.settings").count() == 0
    page.goto("/r/beta/secret")
    assert page.locator("p.manage").count() == 0  # no Settings link without push
    context.close()


def test_robot_tokens_and_the_audit_log_in_the_browser(served, browser) -> None:  # noqa: F811
    process, _, reader = served
    lead = process.token("lead-tokens", "push:acme/*")
    for viewport, suffix in ((DESKTOP, "desktop"), (PHONE, "phone")):
        context = browser.new_context(viewport=viewport, base_url=process.url)
        page = context.new_page()
        _sign_in(page, lead, "/")
        page.click("a.who")
        page.wait_for_url("**/tokens")
        name = f"ci-{suffix}"
        page.fill("#t-name", name)
        page.fill("#t-scopes", "push:acme/py-numpy pull:acme/*")
        page.fill("#t-expires", "1d")
        page.click("form.settings button[type=submit]")
        secret = page.locator("#secret").inner_text()
        assert secret.startswith("fkd_") and "shown this once" in page.locator("section.made").inner_text()
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        _shot(page, f"tokens-{suffix}")
        with httpx.Client(base_url=process.url) as api:  # the new token works, with exactly its scopes
            me = api.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"}).json()
            assert me["name"] == name and me["scopes"] == ["push:acme/py-numpy", "pull:acme/*"]
        again = page.goto("/tokens")
        assert secret not in page.content()  # shown once, never again
        assert again is not None and again.headers["cache-control"] == "no-store"
        page.fill("#t-name", f"wide-{suffix}")
        page.fill("#t-scopes", "push:*/*")
        page.click("form.settings button[type=submit]")
        assert "cannot grant push:*/*" in page.locator("p.error").inner_text()
        page.click(f"button[aria-label='Revoke token {name}']")
        page.wait_for_url(f"**/tokens?revoked={name}")
        with httpx.Client(base_url=process.url) as api:  # (the hub's accepted-token cache may serve it a while)
            listed = api.get("/api/v1/tokens", headers={"Authorization": f"Bearer {lead}"}).json()
            assert name not in [t["name"] for t in listed]
        page.goto("/n/acme/audit")
        actions = page.locator("table.audit tbody tr td:nth-child(3)").all_inner_texts()
        assert actions[:2] == ["token.revoke", "token.create"] and "push" in actions
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        _shot(page, f"audit-{suffix}")
        context.close()

    context = browser.new_context(viewport=DESKTOP, base_url=process.url)
    page = context.new_page()
    cookies_before = context.cookies()
    assert page.goto("/tokens").status == 401  # signed out
    _sign_in(page, reader, "/")
    assert page.goto("/n/acme/audit").status == 403  # a pull-only token is no member
    page.goto("/tokens")
    assert page.locator("#t-name").count() == 0  # makes no tokens
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    with httpx.Client(base_url=process.url, cookies=cookies) as forged:  # no CSRF token: refused
        assert forged.post("/tokens", data={"name": "x", "scopes": "pull:beta/*"}).status_code == 403
    assert cookies_before == [] and context.cookies()
    context.close()


def test_an_admin_manages_webhooks_in_the_browser(served, browser) -> None:  # noqa: F811
    process, _, reader = served
    admin = process.token("ops-web", "admin")
    for viewport, suffix in ((DESKTOP, "desktop"), (PHONE, "phone")):
        context = browser.new_context(viewport=viewport, base_url=process.url)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))  # noqa: B023
        _sign_in(page, admin, "/n/acme")
        page.click("p.manage a:has-text('Webhooks')")
        page.wait_for_url("**/n/acme/webhooks")
        assert page.locator("h1").inner_text() == "Webhooks of acme"
        page.fill("#w-url", "ftp://127.0.0.1/hook")  # the browser's own check would stop a non-URL; the hub's this
        page.click("form.settings button[type=submit]")
        assert "must be http:// or https://" in page.locator("p.error").inner_text()
        page.fill("#w-url", f"http://127.0.0.1:9/hooks/{suffix}")
        page.check("input[name=events][value=push]")
        page.check("input[name=events][value=tag]")
        page.click("form.settings button[type=submit]")
        secret = page.locator("#secret").inner_text()
        assert len(secret) >= 40 and "shown this once" in page.locator("section.made").inner_text()
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        _shot(page, f"webhooks-{suffix}")
        with httpx.Client(base_url=process.url, headers={"Authorization": f"Bearer {admin}"}) as api:
            hooks = {h["url"]: h for h in api.get("/api/v1/namespaces/acme/webhooks").json()}
        hook = hooks[f"http://127.0.0.1:9/hooks/{suffix}"]
        assert hook["events"] == ["push", "tag"]
        page.goto("/n/acme/webhooks")
        assert secret not in page.content()  # shown once, never again
        page.click(f"button[aria-label='Remove webhook {hook['id']}']")
        page.wait_for_url(f"**/n/acme/webhooks?removed={hook['id']}")
        assert page.locator("p.notice").inner_text() == f"Webhook {hook['id']} removed."
        assert errors == []
        context.close()

    context = browser.new_context(viewport=DESKTOP, base_url=process.url)
    page = context.new_page()
    _sign_in(page, reader, "/")
    response = page.goto("/n/acme/webhooks")  # not an admin: the API's 403, as a page
    assert response is not None and response.status == 403
    assert page.locator("#w-url").count() == 0
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    with httpx.Client(base_url=process.url, cookies=cookies) as forged:  # no CSRF token: refused
        assert forged.post("/n/acme/webhooks", data={"url": "http://127.0.0.1:9/x"}).status_code == 403
    context.close()
