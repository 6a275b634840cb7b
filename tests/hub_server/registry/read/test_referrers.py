"""The referrers list, on SQLite and PostgreSQL: one bounded page at a time (issue 27, item 1: 20
referrers of one digest with 150k annotations each made every anonymous list take 22.5 s and 49.5 MB)."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

from hub_server.settings import Limits
from manifest import mediatypes as mt
from tests.hub_server.pushing import auth, expect_error
from tests.hub_server.registry.push.test_oci_content import artifact, digest, upload

SUBJECT = {"mediaType": mt.OCI_MANIFEST, "digest": digest(b"subject"), "size": 7}


def push_referrers(hub, token: str, repo: str, count: int, note_bytes: int = 10) -> list[str]:
    upload(hub, token, repo, b"{}")
    pushed = []
    for i in range(count):
        body = artifact(SUBJECT, annotations={"n": f"{i:04d}", "note": "x" * note_bytes})
        r = hub.client.put(f"/v2/{repo}/manifests/{digest(body)}", content=body, headers=auth(token))
        assert r.status_code == 201, r.text
        pushed.append(digest(body))
    return pushed


def test_pages_follow_links_in_push_order(make_hub):
    hub = make_hub(limits=replace(Limits(), referrers_page=3))
    token = hub.token("ci", "push:acme/*")
    pushed = push_referrers(hub, token, "acme/refs", 8)
    seen: list[str] = []
    url: str | None = f"/v2/acme/refs/referrers/{SUBJECT['digest']}"
    pages = 0
    while url:
        r = hub.client.get(url, headers=auth(token))
        assert r.status_code == 200, r.text
        page = [m["digest"] for m in r.json()["manifests"]]
        assert 1 <= len(page) <= 3
        seen += page
        pages += 1
        url = r.links.get("next", {}).get("url")
    assert pages == 3 and sorted(seen) == sorted(pushed) and len(seen) == len(set(seen))
    # n asks for fewer; never more than the limit
    r = hub.client.get(f"/v2/acme/refs/referrers/{SUBJECT['digest']}", params={"n": 50}, headers=auth(token))
    assert len(r.json()["manifests"]) == 3 and "n=50" in r.headers["Link"]
    r = hub.client.get(
        f"/v2/acme/refs/referrers/{SUBJECT['digest']}", params={"last": digest(b"nope")}, headers=auth(token)
    )
    assert expect_error(r, 400, "INVALID_REQUEST")["field"] == "last"


def test_a_list_holds_a_bounded_page_however_large_the_referrers(make_hub):
    """40 referrers with 60 KB of annotations each (2.4 MB in all): one answer stays under the 1 MiB page,
    and what serving it allocates stays a small multiple of that, not of what was pushed."""
    hub = make_hub()
    token = hub.token("ci", "push:acme/*")
    push_referrers(hub, token, "acme/big", 40, note_bytes=60_000)
    url = f"/v2/acme/big/referrers/{SUBJECT['digest']}"
    hub.client.get(url, headers=auth(token))  # warm caches and imports
    tracemalloc.start()
    try:
        r = hub.client.get(url, headers=auth(token))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 200 and len(r.content) <= (1 << 20) + 4096
    assert 10 <= len(r.json()["manifests"]) < 40 and 'rel="next"' in r.headers["Link"]
    assert peak < 6 << 20, f"serving one page allocated {peak:,} bytes"
