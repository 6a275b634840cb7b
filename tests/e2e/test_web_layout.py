"""Issue 30 item 5 and the catalog polish, in a real browser (Debian's Chromium, Playwright) at 1280 px and
390 px against a real hub process: nothing is squeezed, cut or clipped, tag names stay whole, and dark mode
follows the system setting. Geometry is measured, not eyeballed; screenshots go to the artifacts folder
(``docs/images/`` holds the ones docs/web.md shows)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.test_web_browser import CHROMIUM, _shot, browser, served  # noqa: F401  (fixtures)
from tests.hub_server.pushing import auth

pytestmark = pytest.mark.slow

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
LONG_TAG = "py3.12-slim-bookworm-numpy-2026"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture(scope="module")
def hyphenated(served) -> str:  # noqa: F811
    """A tag name full of hyphens on acme/py-numpy (the same manifest as 1.26)."""
    process, catalog, _ = served
    with httpx.Client(base_url=process.url, timeout=60) as client:
        got = client.get("/v2/acme/py-numpy/manifests/1.26", headers={**auth(catalog.admin), "Accept": OCI_MANIFEST})
        assert got.status_code == 200, got.text
        put = client.put(
            f"/v2/acme/py-numpy/manifests/{LONG_TAG}",
            content=got.content,
            headers={**auth(catalog.admin), "Content-Type": got.headers["content-type"]},
        )
        assert put.status_code == 201, put.text
        readme = "# py-numpy\n\nNumPy on **Python 3.12**, prebaked.\n\n- import it\n- fork it\n"
        patched = client.patch(
            "/api/v1/repositories/acme/py-numpy", json={"readme": readme}, headers=auth(catalog.admin)
        )
        assert patched.status_code == 200, patched.text
    return LONG_TAG


def _inside(page, selector: str, width: int) -> list[str]:  # noqa: ANN001
    """The elements matching ``selector`` that reach past the viewport's right edge (or are cut by a scroller)."""
    return page.evaluate(
        """([sel, width]) => Array.from(document.querySelectorAll(sel))
            .filter(e => e.getClientRects().length > 0)
            .filter(e => { const r = e.getBoundingClientRect(); return r.right > width + 0.5 || r.left < -0.5; })
            .map(e => e.outerHTML.slice(0, 80))""",
        [selector, width],
    )


def test_phone_layer_page_gives_annotation_values_the_width(served, browser, hyphenated) -> None:  # noqa: F811
    process, _, _ = served
    context = browser.new_context(viewport=PHONE, base_url=process.url, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto("/r/acme/py-numpy/t/1.26")
    widths = page.evaluate(
        "Array.from(document.querySelectorAll('dl.annotations dd')).map(e => e.getBoundingClientRect().width)"
    )
    assert widths and min(widths) >= 250, f"annotation values squeezed to {widths} px on a 390 px screen"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    _shot(page, "layer-phone-annotations")
    context.close()


def test_phone_tags_table_shows_every_column_within_the_screen(served, browser, hyphenated) -> None:  # noqa: F811
    process, _, _ = served
    context = browser.new_context(viewport=PHONE, base_url=process.url, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto("/r/acme/py-numpy")
    _shot(page, "repo-phone")
    _shot(page, "repo-phone-top", full_page=False)
    wide = _inside(page, "body *", PHONE["width"])
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], wide
    cut = _inside(page, "table.tags td", PHONE["width"])
    assert cut == [], f"tags table cells cut at the screen's edge: {cut}"
    shown = page.evaluate(
        "Array.from(document.querySelectorAll('table.tags tr:first-child td'))"
        ".filter(e => getComputedStyle(e).display !== 'none').length"
    )
    assert shown == 9, f"only {shown} of the 9 columns are shown on a phone"
    tag = page.locator("table.tags a.tagname", has_text=hyphenated)
    assert tag.evaluate("e => e.getClientRects().length") == 1, "the tag name wraps at its hyphens"
    box = tag.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"], f"the tag name runs off the screen: {box}"
    clipped = tag.evaluate("e => e.parentElement.scrollWidth > e.parentElement.clientWidth + 1")
    assert not clipped, "the tag name is cut at its card's edge"
    assert page.locator("section.readme h1", has_text="py-numpy").is_visible()  # the README, as Markdown
    context.close()


def test_desktop_commands_are_never_clipped_under_the_copy_button(served, browser, hyphenated) -> None:  # noqa: F811
    process, _, _ = served
    context = browser.new_context(viewport=DESKTOP, base_url=process.url)
    page = context.new_page()
    for path in ("/r/acme/py-numpy", "/r/acme/py-numpy/t/1.26", f"/r/acme/py-numpy/t/{hyphenated}"):
        page.goto(path)
        page.wait_for_function("document.documentElement.classList.contains('js')")  # the Copy buttons are shown
        for cmd in page.locator("div.cmd").all():
            code, button = cmd.locator("code"), cmd.locator("button.copy")
            clipped = code.evaluate("e => e.scrollWidth > e.clientWidth + 1")
            assert not clipped, f"{path}: {code.inner_text()!r} is clipped"
            c, b = code.bounding_box(), button.bounding_box()
            assert c is not None and b is not None and c["x"] + c["width"] <= b["x"] + 0.5, f"{path}: overlaps Copy"
        if "/t/" in path:
            assert page.locator("h1 .tagname").evaluate("e => e.getClientRects().length") == 1
    _shot(page, "layer-desktop-long-tag", full_page=False)
    page.goto("/r/acme/py-numpy")
    page.wait_for_function("document.documentElement.classList.contains('js')")
    tag = page.locator("table.tags a.tagname", has_text=hyphenated)
    assert tag.evaluate("e => e.getClientRects().length") == 1, "the tag name wraps at its hyphens"
    cut = page.locator("div.tablewrap").evaluate("e => e.scrollWidth - e.clientWidth")
    assert cut <= 1, f"the tags table is cut by {cut} px at 1280 px"
    _shot(page, "repo-desktop")
    context.close()


def test_dark_mode_follows_the_system_setting(served, browser) -> None:  # noqa: F811
    process, _, _ = served
    for scheme, dark in (("dark", True), ("light", False)):
        context = browser.new_context(viewport=DESKTOP, base_url=process.url, color_scheme=scheme)
        page = context.new_page()
        page.goto("/r/acme/py-numpy/t/1.26")
        rgb = page.evaluate("getComputedStyle(document.body).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number)")
        luminance = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255
        assert (luminance < 0.2) if dark else (luminance > 0.8), f"{scheme}: body background {rgb}"
        box = page.evaluate("getComputedStyle(document.querySelector('svg.lineage rect')).fill")
        assert (box != "rgb(255, 255, 255)") if dark else (box == "rgb(255, 255, 255)"), box
        if dark:
            _shot(page, "layer-desktop-dark", full_page=False)
        context.close()
