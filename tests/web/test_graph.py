"""The server-drawn lineage graph: layout order, accessibility, and escaping of every text."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from web.graph import MAX_DEPENDENTS, GraphNode, lineage_svg
from web.text import excerpt, human_bytes, link_digests, markdown_html, short_digest, summary_line

HOSTILE = '</text><script>alert(1)</script><a href="javascript:x">&'
SVG = "{http://www.w3.org/2000/svg}"


def test_graph_is_well_formed_svg_with_every_text_escaped() -> None:
    chain = [
        GraphNode(f"base {HOSTILE}", f"detail {HOSTILE}", f"/r/a/b/t/{HOSTILE}"),
        GraphNode("head", "d", "/r/a/b/t/v2", edge=f"+1 KiB {HOSTILE}"),
    ]
    svg = str(lineage_svg(f"Lineage {HOSTILE}", chain, [GraphNode("dep", "builds on", "/x", "dependent")]))
    root = ET.fromstring(svg)  # parses: nothing broke out of its element
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    assert root.find(f"{SVG}title").text == f"Lineage {HOSTILE}"
    assert not list(root.iter(f"{SVG}script"))
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "label"]
    assert labels[0].startswith("base </text><script>") and labels[1:] == ["head", "dep"]
    hrefs = [a.get("href") for a in root.iter(f"{SVG}a")]
    assert hrefs[0] == f"/r/a/b/t/{HOSTILE}" and hrefs[1:] == ["/r/a/b/t/v2", "/x"]  # attribute, not markup
    ys = [float(r.get("y")) for r in root.iter(f"{SVG}rect")]
    assert ys == sorted(ys)  # base above head above dependents


def test_many_dependents_are_summarised() -> None:
    deps = [GraphNode(f"d{i}", "", f"/d{i}") for i in range(MAX_DEPENDENTS + 3)]
    svg = str(lineage_svg("t", [GraphNode("base", "", "/b")], deps))
    assert svg.count("<rect") == 1 + MAX_DEPENDENTS and "and 3 more dependents" in svg


def test_markdown_is_rendered_and_sanitised() -> None:
    html = str(
        markdown_html(
            "# T\n\n**b** <script>x</script> [l](javascript:alert(1)) [ok](https://e.x)\n\n<img src=x onerror=alert(1)>"
        )
    )
    assert "<h1>T</h1>" in html and "<strong>b</strong>" in html
    assert "<script" not in html and "<img" not in html and 'href="javascript' not in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html  # shown as text
    assert '<a href="https://e.x" rel="noopener noreferrer nofollow">ok</a>' in html
    assert summary_line("**Python** <b>3</b> & co") == "Python <b>3</b> & co"  # raw HTML stays text
    assert summary_line("# NumPy\n\n**Python 3.12**\non a guest.\n\n```\ncode\n```\n\n- a\n- `b`") == (
        "NumPy · Python 3.12 on a guest. · a · b"
    )
    marked = str(excerpt("# Python\n\n**Python 3.12** <b>x</b>", "pyth"))
    assert marked == "<mark>Python</mark> · <mark>Python</mark> 3.12 &lt;b&gt;x&lt;/b&gt;"
    long = str(excerpt("word " * 60 + "numpy here " + "tail " * 40, "numpy"))
    assert long.startswith("…word") and "<mark>numpy</mark> here" in long and long.endswith("…")


def test_small_formatters() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 << 30, None)] == ["0 B", "1023 B", "1.5 KiB", "5.0 GiB", "–"]
    digest = "blake3:" + "ab" * 32
    assert short_digest(digest) == "blake3:abababababab"
    linked = str(link_digests(f'{{"d": "{digest}", "x": "<b>"}}', {}, "acme/r"))
    assert f'<a href="/v2/acme/r/blobs/{digest}">{digest}</a>' in linked and "&lt;b&gt;" in linked
    assert '<a href="/r/acme/r/t/v1">' in str(link_digests(digest, {digest: "/r/acme/r/t/v1"}, "acme/r"))
