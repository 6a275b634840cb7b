"""The catalog in a real browser: Debian's Chromium driven by Playwright against a real
``forkd-hub serve`` process seeded through the HTTP API.

Home → search → repository → tag (the lineage graph is drawn, the copy button copies) → sign in
→ a private repository appears. Desktop and phone screenshots land in ``test-artifacts/web/``
(gitignored), or in ``$FORKD_WEB_ARTIFACTS``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.hub_server.pushing import PushClient, chain_images
from tests.web.seeding import Catalog, seed_catalog

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="pip install playwright (see scripts/install-web-deps.sh)"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (scripts/install-web-deps.sh)"),
]

ARTIFACTS = Path(os.environ.get("FORKD_WEB_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts" / "web"))
DESKTOP = {"width": 1200, "height": 820}
PHONE = {"width": 390, "height": 844}


class RealHub:
    """What ``seed_catalog`` needs (``client``, ``token``, ``pusher``) over a real hub process."""

    def __init__(self, process: HubProcess) -> None:
        self.process = process
        self.client = httpx.Client(base_url=process.url, timeout=60)

    def token(self, name: str, *scopes: str) -> str:
        return self.process.token(name, *scopes)

    def pusher(self, token: str | None = None) -> PushClient:
        return PushClient(self.client, token)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubProcess, Catalog, str]]:
    root = tmp_path_factory.mktemp("web-e2e")
    process = HubProcess(root / "data", root / "hub.log")
    hub = RealHub(process)
    try:
        (root / "images").mkdir()
        catalog = seed_catalog(hub, chain_images(root / "images"), root / "seed", pulls=True)
        reader = hub.token("reader", "pull:beta/*")
        yield process, catalog, reader
    finally:
        hub.client.close()
        process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def _shot(page, name: str, *, full_page: bool = True) -> Path:  # noqa: ANN001
    """A screenshot in the artifacts folder (``docs/images/web-*.png`` are the ``*-top`` ones)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


def test_browse_search_copy_and_sign_in(served, browser) -> None:  # noqa: ANN001
    process, _catalog, reader = served
    context = browser.new_context(viewport=DESKTOP, base_url=process.url)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=process.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: errors.append(f"dialog opened: {d.message}"))

    page.goto("/")
    assert page.title() == "Home · forkd hub"
    assert page.locator("h2", has_text="Recently updated").is_visible()
    pulled = page.locator("section[aria-labelledby=pulled-h] li.card h3 a")
    assert pulled.all_inner_texts() == ["acme/py-numpy", "acme/py-base", "acme/py-pandas"]
    assert "beta/secret" not in page.content()
    _shot(page, "home-desktop")
    _shot(page, "home-desktop-top", full_page=False)

    page.fill("#q", "numpy")
    page.press("#q", "Enter")
    page.wait_for_url("**/search?q=numpy*")
    hit = page.locator("li.card h3 a", has_text="py-numpy")
    assert hit.count() == 1 and page.locator("li.card mark").first.inner_text().lower() == "numpy"
    _shot(page, "search-desktop")

    hit.click()
    page.wait_for_url("**/r/acme/py-numpy")
    assert page.locator("table.tags td a", has_text="1.26").is_visible()
    page.locator("table.tags td a", has_text="1.26").click()
    page.wait_for_url("**/r/acme/py-numpy/t/1.26")

    graph = page.locator("svg.lineage")
    assert graph.is_visible()
    box = graph.bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 100
    assert graph.locator("a.node").count() == 3  # base, this layer, the pandas tag that builds on it
    assert (graph.locator("title").text_content() or "").startswith("Lineage of acme/py-numpy:1.26")
    _shot(page, "layer-desktop")
    _shot(page, "layer-desktop-top", full_page=False)

    copy = page.locator("button.copy").first
    assert copy.is_visible()
    expected = copy.get_attribute("data-copy")
    copy.click()
    playwright_api.expect(copy).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == expected
    assert expected.startswith("forkd pull 127.0.0.1:") and expected.endswith("/acme/py-numpy:1.26")

    page.goto("/r/beta/secret")
    assert page.locator("h1").inner_text() == "Not found"
    page.goto("/signin?next=/r/beta/secret")
    page.fill("#token", reader)
    page.click("form.signin button[type=submit]")
    page.wait_for_url("**/r/beta/secret")
    assert page.locator("h1").inner_text().startswith("beta/secret")
    assert "zebra-private-marker" in page.content()
    cookie = next(c for c in context.cookies() if c["name"] == "forkd_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    page.goto("/")
    page.click("button:has-text('Sign out')")
    page.goto("/r/beta/secret")
    assert page.locator("h1").inner_text() == "Not found"
    assert errors == []
    context.close()


def test_phone_layout(served, browser) -> None:  # noqa: ANN001
    process, _, _ = served
    context = browser.new_context(viewport=PHONE, base_url=process.url, is_mobile=True, has_touch=True)
    page = context.new_page()
    for path, name in [
        ("/", "home-phone"),
        ("/r/acme/py-pandas/t/2.2", "layer-phone"),
        ("/r/acme/py-base", "repo-phone"),
    ]:
        page.goto(path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} scrolls sideways on a phone ({width}px)"
        _shot(page, name)
    page.goto("/r/acme/py-pandas/t/2.2")
    svg = page.locator("svg.lineage").bounding_box()
    assert svg is not None and svg["width"] <= PHONE["width"]
    context.close()
