"""Every catalog page rendered from a seeded in-process hub: content, filters, pagination,
escaping of hostile text, and that private data never reaches a caller who may not read it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth
from tests.web.seeding import Catalog


class _Dangers(HTMLParser):
    """Collects what would run or load in a browser: scripts, event handlers, javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and values.get("src") != "/static/copy.js":
            self.found.append(f"<script {values}>")
        if tag in ("img", "iframe", "object", "embed", "foreignobject", "style", "base", "meta") and tag != "meta":
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=…>")
            if name in ("href", "src", "xlink:href", "action") and (value or "").strip().lower().startswith(
                ("javascript:", "data:", "vbscript:")
            ):
                self.found.append(f"<{tag} {name}={value}>")


def dangers(html: str) -> list[str]:
    parser = _Dangers()
    parser.feed(html)
    return parser.found


def page(hub: Hub, url: str, status: int = 200, **kwargs) -> str:
    response = hub.client.get(url, **kwargs)
    assert response.status_code == status, (url, response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    return response.text


def cards(html: str) -> list[str]:
    return re.findall(r'<h3><a href="/r/([^"]+)">', html)


def test_home_lists_repositories_and_the_commands_for_this_hub(hub: Hub, catalog: Catalog) -> None:
    html = page(hub, "/")
    assert "Search 4 repositories and 4 tags" in html
    assert "forkd login http://testserver.local --token-stdin" in html
    assert "forkd pull testserver.local/NAMESPACE/REPOSITORY:TAG" in html
    assert set(cards(html)) == {"acme/py-base", "acme/py-numpy", "acme/py-pandas", "evil/xss"}
    assert "No pulls yet." in html
    hub.client.get("/api/v1/repositories/acme/py-numpy/chain/1.26").raise_for_status()
    html = page(hub, "/")
    most_pulled = html.split('id="pulled-h"')[1]
    assert cards(most_pulled) == ["acme/py-numpy"] and "1 pull ·" in most_pulled


def test_search_is_full_text_with_highlights(hub: Hub, catalog: Catalog) -> None:
    html = page(hub, "/search", params={"q": "numpy"})
    assert cards(html) == ["acme/py-numpy"]
    assert "py-<mark>numpy</mark>" in html
    assert "recipe <mark>numpy" in html  # annotation values too (PostgreSQL marks the token numpy.toml whole)
    described = page(hub, "/search", params={"q": "tiny guest"})
    assert cards(described) == ["acme/py-base"]  # description words
    # Issue 30 item 3: the card shows the Markdown's words, never its markup, matches marked
    assert "Python 3.12 on a <mark>tiny</mark> <mark>guest</mark>. · pip ready · uv installed" in described
    assert "**Python" not in described and "`uv`" not in described
    assert cards(page(hub, "/search", params={"q": "ci-runn"})) == ["acme/py-numpy"]  # prefixes
    assert cards(page(hub, "/search", params={"q": '"unbalanced AND ( NEAR'})) == []  # query syntax is inert
    assert "0 repositories" in page(hub, "/search", params={"q": "nothing-like-this"})


def test_search_filters_and_sort(hub: Hub, catalog: Catalog) -> None:
    html = page(hub, "/search", params={"vmm": "firecracker", "sort": "name"})
    assert cards(html) == ["acme/py-numpy", "acme/py-pandas"]
    assert '<option value="firecracker" selected>' in html and '<option value="8">8 MiB</option>' in html
    assert cards(page(hub, "/search", params={"arch": "x86_64", "sort": "name"})) == ["acme/py-base", "evil/xss"]
    assert cards(page(hub, "/search", params={"mem": "8", "namespace": "acme", "sort": "name"})) == [
        "acme/py-numpy",
        "acme/py-pandas",
    ]
    assert cards(page(hub, "/search", params={"namespace": "evil"})) == ["evil/xss"]
    page(hub, "/search", 400, params={"sort": "sideways"})
    page(hub, "/search", 400, params={"page": "-1"})


def test_namespace_pages_are_paginated(hub: Hub, catalog: Catalog) -> None:
    pusher = hub.pusher(catalog.admin)
    layer = catalog.layers["base"]
    # 21 repositories for two pages of 20, each made as cheaply as the API allows: every blob mounted from
    # acme/py-base (one request each, nothing assembled or hashed again), then the manifest PUT by tag
    for i in range(21):
        for digest in [*layer.data_blobs, *layer.small_blobs]:
            pusher.upload(f"many/repo-{i:02d}", b"", digest, mount_from="acme/py-base")
        pusher.put_manifest(f"many/repo-{i:02d}", "v1", layer.manifest, public=True)
    assert not pusher.transfer.blobs_uploaded  # all mounted
    first = page(hub, "/n/many")
    assert "21 repositories" in first and "Page 1 of 2" in first
    assert cards(first) == [f"many/repo-{i:02d}" for i in range(20)]
    assert '<a rel="next" href="/n/many?page=2">' in first
    second = page(hub, "/n/many", params={"page": 2})
    assert cards(second) == ["many/repo-20"] and '<a rel="prev" href="/n/many?page=1">' in second
    searched = page(hub, "/search", params={"q": "repo", "namespace": "many", "page": 2})
    assert len(cards(searched)) == 1
    assert "page=1" in searched and "namespace=many" in searched
    page(hub, "/n/nobody", 404)


def test_repository_page(hub: Hub, catalog: Catalog) -> None:
    html = page(hub, "/r/acme/py-numpy")
    assert "<h1>acme/py-numpy</h1>" in html
    numpy = catalog.layers["numpy"]
    assert f'href="/r/acme/py-numpy/t/{numpy.digest}"' in html
    assert '<td data-label="By">admin</td>' in html  # the pusher, from the audit log
    assert "forkd pull testserver.local/acme/py-numpy:1.26" in html
    assert f"forkd pull testserver.local/acme/py-numpy@{numpy.digest}" in html
    assert "firecracker · aarch64 · 8 MiB" in html
    base = page(hub, "/r/acme/py-base")
    assert "<strong>Python 3.12</strong>" in base and "<code>uv</code>" in base  # Markdown rendered
    page(hub, "/r/acme/nope", 404)
    page(hub, "/r/ACME/x", 400)


def test_layer_page_draws_the_chain(hub: Hub, catalog: Catalog) -> None:
    html = page(hub, "/r/acme/py-numpy/t/1.26")
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count('class="node') == 3
    assert "acme/py-base:3.12" in svg and "acme/py-numpy:1.26" in svg and "acme/py-pandas:2.2" in svg
    drawn = svg[svg.index("</defs>") :]
    assert drawn.index("acme/py-base:3.12") < drawn.index("acme/py-numpy:1.26") < drawn.index("acme/py-pandas:2.2")
    assert "shared with parent" in svg and '<title id="lineage-title">Lineage of acme/py-numpy:1.26</title>' in svg
    assert "<dt>vmm</dt><dd>firecracker</dd>" in html
    assert "built by ci-runner-7 from recipe numpy.toml" in html
    assert "memory.bin" in html and "vmstate" in html
    config = catalog.layers["numpy"].config
    from manifest.digest import digest_bytes

    assert (
        f'<a href="/v2/acme/py-numpy/blobs/{digest_bytes(config, "sha256")}">' in html
    )  # digests link to their objects
    by_digest = page(hub, f"/r/acme/py-numpy/t/{catalog.layers['numpy'].digest}")
    assert by_digest.count('class="node') == 3
    page(hub, "/r/acme/py-numpy/t/nope", 404)


def test_the_danger_detector_detects(hub: Hub) -> None:
    from tests.web.seeding import HOSTILE, HOSTILE_MARKDOWN

    assert len(dangers(HOSTILE)) >= 3 and dangers(HOSTILE_MARKDOWN)


def test_hostile_text_is_escaped_everywhere(hub: Hub, catalog: Catalog) -> None:
    for url in ["/", "/search?q=evil", "/search?q=pwned", "/n/evil", "/r/evil/xss", "/r/evil/xss/t/v1"]:
        html = page(hub, url)
        assert dangers(html) == [], url
    html = page(hub, "/r/evil/xss/t/v1")
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in html  # shown, as text
    repo = page(hub, "/r/evil/xss")
    assert "<h1>Evil</h1>" in repo  # the Markdown still renders; only the HTML in it is dropped


def test_private_repositories_stay_private(hub: Hub, catalog: Catalog) -> None:
    def signed_in(token: str):
        client = hub.client
        client.cookies.clear()
        signin = client.get("/signin")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', signin.text).group(1)
        r = client.post("/signin", data={"token": token, "csrf": csrf, "next": "/"}, follow_redirects=False)
        assert r.status_code == 303, r.text
        return client

    outsider = hub.token("outsider", "pull:acme/*")
    reader = hub.token("reader", "pull:beta/*")
    for who in (None, outsider):
        if who is None:
            hub.client.cookies.clear()
        else:
            signed_in(who)
        for url in ["/", "/search", "/search?q=zebra", "/search?q=secret", "/n/acme"]:
            html = page(hub, url)
            assert "private-marker" not in html and "beta/secret" not in html and "secret.note" not in html, url
        page(hub, "/n/beta", 404)
        page(hub, "/r/beta/secret", 404)
        page(hub, "/r/beta/secret/t/v1", 404)
        assert "0 repositories" in page(hub, "/search", params={"q": "zebra"})
        assert '<option value="beta"' not in page(hub, "/search")  # not even as a filter value
        assert "private-marker" not in page(hub, "/search", params={"namespace": "beta"})
    signed_in(reader)
    assert cards(page(hub, "/search", params={"q": "zebra"})) == ["beta/secret"]
    assert '<option value="beta"' in page(hub, "/search")
    assert "zebra-private-marker internal build" in page(hub, "/r/beta/secret")
    assert "beta/secret" in page(hub, "/")
    # a hostile annotation in the private repository is escaped too
    assert dangers(page(hub, "/r/beta/secret/t/v1")) == []
    hub.client.cookies.clear()


def test_repository_page_shows_the_tag_policies(hub: Hub, catalog: Catalog) -> None:
    assert "immutable tags" not in page(hub, "/r/acme/py-numpy")  # nothing set: nothing shown
    r = hub.client.patch(
        "/api/v1/repositories/acme/py-numpy",
        headers=auth(catalog.admin),
        json={
            "immutableTags": True,
            "immutableExempt": "latest,dev-*",
            "retention": {"keepLast": 5, "keepDays": 1, "pattern": "nightly-*"},
        },
    )
    assert r.status_code == 200, r.text
    html = page(hub, "/r/acme/py-numpy")
    assert '<span class="badge">immutable tags</span> except latest,dev-*' in html
    assert '<span class="badge">retention</span> of nightly-*: keep the last 5 and those set within 1 day' in html


def test_layer_page_shows_provenance_referrers(hub: Hub, catalog: Catalog) -> None:
    """Issue 14: a provenance artifact attached to a layer (an OCI referrer, as ``forkd push`` in CI
    attaches it) is listed on the layer's page with its annotations, escaped."""
    import json

    from manifest.digest import digest_bytes
    from tests.web.seeding import HOSTILE

    assert "Not signed, and no provenance attached" in page(hub, "/r/acme/py-numpy/t/1.26")
    pusher = hub.pusher(catalog.admin)
    numpy = catalog.layers["numpy"]
    statement = json.dumps({"_type": "https://in-toto.io/Statement/v1"}).encode()
    for data in (b"{}", statement):
        pusher.ensure_blob("acme/py-numpy", data, str(digest_bytes(data, "sha256")))
    referrer = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.in-toto+json",
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": str(digest_bytes(b"{}", "sha256")),
                "size": 2,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.in-toto+json",
                    "digest": str(digest_bytes(statement, "sha256")),
                    "size": len(statement),
                }
            ],
            "subject": {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": numpy.digest,
                "size": len(numpy.manifest),
            },
            "annotations": {
                "dev.forkd.ci.run-url": "https://github.com/acme/envs/actions/runs/4242",
                "org.opencontainers.image.revision": "0123abcd",
                "dev.forkd.ci.runner": HOSTILE,
            },
        }
    ).encode()
    digest = str(digest_bytes(referrer, "sha256"))
    pusher.put_manifest("acme/py-numpy", digest, referrer)
    html = page(hub, "/r/acme/py-numpy/t/1.26")
    section = html.split('id="provenance-h"', 1)[1].split("</section>", 1)[0]
    assert "application/vnd.in-toto+json" in section and f'/v2/acme/py-numpy/manifests/{digest}"' in section
    assert "<dt>dev.forkd.ci.run-url</dt><dd>https://github.com/acme/envs/actions/runs/4242</dd>" in section
    assert "<dt>org.opencontainers.image.revision</dt><dd>0123abcd</dd>" in section
    assert '<p class="empty">Not signed.</p>' in section and "no provenance attached" not in section
    assert dangers(html) == []
    assert "Not signed, and no provenance attached" in page(hub, "/r/acme/py-base/t/3.12")  # the parent has none


BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_unknown_urls_are_a_page_for_browsers_and_json_for_api_clients(hub: Hub) -> None:
    """Issue 30 item 6: an unknown URL answered raw JSON to a browser."""
    html = page(hub, "/no/such/page", 404, headers=BROWSER)
    assert "<h1>Not found</h1>" in html and "There is no page at /no/such/page." in html
    assert '<a href="/">Back to the catalog</a>' in html
    assert "Not allowed here" in page(hub, "/signout", 405, headers=BROWSER)  # a form's target, opened as a link
    for headers in ({}, {"Accept": "application/json"}, {"Accept": "*/*"}):  # curl, httpx, API clients
        r = hub.client.get("/no/such/page", headers=headers)
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/json")
        assert r.json()["errors"][0]["code"] == "NOT_FOUND"
    for url in ("/v2/acme/nope/x", "/api/v1/nope"):  # the API's own paths keep the envelope even for a browser
        r = hub.client.get(url, headers=BROWSER)
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/json"), url
