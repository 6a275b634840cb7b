"""Text helpers for the templates: Markdown descriptions, sizes, times, digests, highlights.

Descriptions are Markdown written by whoever may push: :func:`markdown_html` renders them with
markdown-it-py (CommonMark, raw HTML disabled) and then sanitises the result with nh3 (Ammonia):
an allow-list of tags and attributes, only http/https/mailto links, ``rel="noopener noreferrer
nofollow"`` on every link. Two layers on purpose: the renderer never passes raw HTML through, and
the sanitiser would remove it if it did. Everything else is escaped by Jinja's autoescape.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import nh3
from markupsafe import Markup, escape

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

__all__ = [
    "FILTERS",
    "excerpt",
    "highlighted",
    "human_bytes",
    "link_digests",
    "markdown_html",
    "short_digest",
    "summary_line",
    "time_ago",
]


@functools.cache
def _markdown() -> MarkdownIt:
    """The renderer, made on the first description rendered (markdown-it: ~30 ms of imports kept out of the
    hub's start-up, bench/hub_startup.py)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")


_TAGS = {
    "p",
    "br",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "strong",
    "em",
    "del",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}
_ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}, "ol": {"start"}}
MAX_MARKDOWN = 16_384


@functools.lru_cache(maxsize=2048)
def markdown_html(text: str) -> Markup:
    """Sanitised HTML for a Markdown description (safe to insert unescaped)."""
    rendered = _markdown().render((text or "")[:MAX_MARKDOWN])
    clean = nh3.clean(
        rendered,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return Markup(clean)  # noqa: S704 - sanitised by nh3 just above


_SPACES = re.compile(r"\s+")
#: between the blocks (heading, paragraph, list item) of a one-line summary
SEPARATOR = " · "
EXCERPT_CHARS = 160
EXCERPT_BEFORE = 50


@functools.lru_cache(maxsize=2048)
def summary_line(markdown: str) -> str:
    """The words of a Markdown description as one plain line: its blocks (headings, paragraphs, list items)
    joined by `` · ``, without markup; code blocks left out, raw HTML kept as the text it is shown as."""
    blocks: list[str] = []
    for token in _markdown().parse((markdown or "")[:MAX_MARKDOWN]):
        if token.type != "inline":
            continue
        words = "".join(
            " " if child.type in ("softbreak", "hardbreak") else child.content
            for child in token.children or []
            if child.type in ("text", "code_inline", "softbreak", "hardbreak")
        )
        text = _SPACES.sub(" ", words).strip()
        if text:
            blocks.append(text)
    return SEPARATOR.join(blocks)


def excerpt(markdown: str, query: str = "", width: int = EXCERPT_CHARS) -> Markup:
    """A search card's line: :func:`summary_line` cut to about ``width`` characters around the first word
    of ``query`` it contains, each word starting with a query word in ``<mark>`` (escaped HTML)."""
    line = summary_line(markdown)
    words = [w for w in re.findall(r"\w+", query.lower()) if w]
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\w*", re.IGNORECASE) if words else None
    first = pattern.search(line) if pattern else None
    start = 0
    if first is not None and first.start() > EXCERPT_BEFORE and len(line) > width:
        start = line.rfind(" ", 0, first.start() - EXCERPT_BEFORE) + 1
    end = len(line) if len(line) - start <= width else max(line.rfind(" ", start, start + width), start + width // 2)
    piece = line[start:end]
    parts: list[tuple[str, bool]] = []
    at = 0
    for match in pattern.finditer(piece) if pattern else ():
        parts += [(piece[at : match.start()], False), (match.group(0), True)]
        at = match.end()
    parts.append((piece[at:], False))
    return Markup("").join(
        [Markup("…") if start else Markup(""), highlighted(parts), Markup("…") if end < len(line) else Markup("")]
    )


def human_bytes(size: int | None) -> str:
    """``1536`` → ``1.5 KiB`` (binary units, as the CLI prints them)."""
    if size is None:
        return "–"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover - loop always returns


def time_ago(when: datetime, now: datetime | None = None) -> str:
    """``3 minutes ago`` style, for listings (the exact UTC time goes in a ``<time>`` attribute)."""
    seconds = int(((now or datetime.now(UTC)) - when).total_seconds())
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= length:
            count = seconds // length
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "just now"


def iso_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def short_digest(digest: str) -> str:
    """``blake3:0123456789ab…`` (algorithm and the first 12 hex digits)."""
    algorithm, _, hexpart = digest.partition(":")
    return f"{algorithm}:{hexpart[:12]}" if hexpart else digest[:19]


def highlighted(parts: list[tuple[str, bool]]) -> Markup:
    """Escaped text with the matched pieces in ``<mark>``."""
    return Markup("").join(Markup("<mark>{}</mark>").format(t) if hit else escape(t) for t, hit in parts)


_DIGEST = re.compile(r"\b(?:sha256|sha512|blake3):[0-9a-f]{32,128}\b")


def link_digests(document: str, layers: dict[str, str], repository: str) -> Markup:
    """Escape a pretty-printed document and link every digest in it: layers of the chain to their
    pages, anything else to the blob it names (``/v2/{repository}/blobs/{digest}``)."""
    escaped = str(escape(document))

    def link(match: re.Match[str]) -> str:
        digest = match.group(0)
        href = layers.get(digest) or f"/v2/{repository}/blobs/{digest}"
        return f'<a href="{escape(href)}">{digest}</a>'

    return Markup(_DIGEST.sub(link, escaped))  # noqa: S704 - built from escaped text and hex digests


FILTERS = {
    "linkdigests": link_digests,
    "markdown": markdown_html,
    "excerpt": excerpt,
    "bytes": human_bytes,
    "ago": time_ago,
    "iso": iso_time,
    "short": short_digest,
    "highlighted": highlighted,
}
