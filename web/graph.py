"""The lineage graph of a layer, drawn on the server as inline SVG (no JavaScript).

Base at the top, head at the bottom, one box per link with what it adds, the edge between two
links labelled with the child's new and shared bytes, then the tags that build on the head
(dependents) below it with dashed edges. Each box links to that layer's page. The SVG carries
``role="img"`` with a ``<title>`` and ``<desc>`` naming the chain for screen readers.

Every piece of text is escaped by ``Markup.format`` (markupsafe): names, tags and digests can never
become markup, in the SVG as anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from hub_server.registry.read.layerview import LinkView
from web.text import human_bytes, short_digest

__all__ = ["GraphNode", "lineage_svg", "link_nodes"]

WIDTH = 440
BOX_W = 400
BOX_H = 52
GAP = 40
LEFT = 20
MAX_DEPENDENTS = 6
MAX_LABEL = 46


@dataclass(frozen=True)
class GraphNode:
    label: str
    detail: str
    href: str
    edge: str = ""
    """The label of the edge into this node (empty for the base)."""


def _clip(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _box(node: GraphNode, y: int, css: str) -> Markup:
    return Markup(
        '<a href="{href}" class="node {css}"><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8"/>'
        '<text x="{tx}" y="{ty1}" class="label">{label}</text>'
        '<text x="{tx}" y="{ty2}" class="detail">{detail}</text></a>'
    ).format(
        href=node.href,
        css=css,
        x=LEFT,
        y=y,
        w=BOX_W,
        h=BOX_H,
        tx=LEFT + 14,
        ty1=y + 21,
        ty2=y + 40,
        label=_clip(node.label),
        detail=_clip(node.detail, 60),
    )


def _edge(y_from: int, y_to: int, label: str, *, dashed: bool = False) -> Markup:
    x = LEFT + 36
    return Markup(
        '<line x1="{x}" y1="{y1}" x2="{x}" y2="{y2}" class="edge{dash}" marker-end="url(#arrow)"/>'
        '<text x="{tx}" y="{ty}" class="edge-label">{label}</text>'
    ).format(
        x=x,
        y1=y_from,
        y2=y_to - 3,
        dash=" dashed" if dashed else "",
        tx=x + 12,
        ty=(y_from + y_to) // 2 + 4,
        label=_clip(label, 52),
    )


def lineage_svg(title: str, chain: Sequence[GraphNode], dependents: Sequence[GraphNode], more: int = 0) -> Markup:
    """The whole graph: ``chain`` base → head, then up to six ``dependents`` (``more`` are left out)."""
    parts: list[Markup] = []
    y = 10
    for i, node in enumerate(chain):
        if i:
            parts.append(_edge(y - GAP, y, node.edge))
        parts.append(_box(node, y, "head" if i == len(chain) - 1 else "link"))
        y += BOX_H + GAP
    head_bottom = y - GAP
    shown = list(dependents[:MAX_DEPENDENTS])
    for j, node in enumerate(shown):
        parts.append(_edge(head_bottom if j == 0 else y - GAP, y, node.edge, dashed=True))
        parts.append(_box(node, y, "dependent"))
        y += BOX_H + GAP
    extra = more + max(0, len(dependents) - MAX_DEPENDENTS)
    if extra:
        parts.append(
            Markup('<text x="{x}" y="{y}" class="edge-label">and {n} more dependents</text>').format(
                x=LEFT, y=y - GAP + 24, n=extra
            )
        )
        y += 10
    height = y - GAP + 20
    names = " → ".join(n.label for n in chain)
    desc = f"Chain of {len(chain)} link(s), base to head: {names}."
    if dependents:
        desc += f" {len(dependents) + more} dependent tag(s): " + ", ".join(n.label for n in shown) + "."
    return Markup(
        '<svg xmlns="http://www.w3.org/2000/svg" class="lineage" role="img" viewBox="0 0 {w} {h}" width="{w}" '
        'height="{h}" aria-labelledby="lineage-title lineage-desc">'
        '<title id="lineage-title">{title}</title><desc id="lineage-desc">{desc}</desc>'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead"/></marker></defs>'
        "{body}</svg>"
    ).format(w=WIDTH, h=height, title=title, desc=desc, body=Markup("").join(parts))


def link_nodes(links: Sequence[LinkView], href: Callable[[LinkView], str]) -> list[GraphNode]:
    """Graph nodes for a layer view's links (``registry.layerview.LinkView``)."""
    nodes = []
    for i, link in enumerate(links):
        name = f"{link.repository}:{link.tags[0]}" if link.tags else f"{link.repository}@{short_digest(link.digest)}"
        detail = f"{human_bytes(link.logical_size)} logical · {human_bytes(link.stored_size)} stored"
        edge = (
            ""
            if i == 0
            else (f"+{human_bytes(link.stored_size)} new · {human_bytes(link.shared_with_parent)} shared with parent")
        )
        nodes.append(GraphNode(name, detail, href(link), edge))
    return nodes
