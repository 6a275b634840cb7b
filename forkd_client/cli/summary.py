"""A repository's Markdown description as one plain line, for tables (``forkd search``, ``forkd repo``).

``# NumPy\n\n**Python 3.12** on a tiny guest.\n\n- pip ready`` becomes ``NumPy · Python 3.12 on a tiny guest. · pip
ready``: the words of each block (headings, paragraphs, list items, table cells), markup dropped, joined with
`` · ``; code blocks and raw HTML are left out; line breaks and tabs become spaces. Other control characters stay,
for the output layer to show as visible escapes (``output.terminal_safe``), as everywhere else. markdown-it-py
(CommonMark) is imported only when a command needs it.
"""

from __future__ import annotations

import re

__all__ = ["one_line"]

_SPACES = re.compile(r"\s+")
_SEPARATOR = " · "


def one_line(markdown: str, width: int | None = None) -> str:
    """The plain one-line summary of ``markdown``, cut to ``width`` characters with ``…`` (None: whole)."""
    from markdown_it import MarkdownIt

    blocks: list[str] = []
    for token in MarkdownIt("commonmark").parse(markdown or ""):
        if token.type != "inline":
            continue
        words = "".join(
            " " if child.type in ("softbreak", "hardbreak") else child.content
            for child in token.children or []
            if child.type in ("text", "code_inline", "softbreak", "hardbreak")  # raw HTML is left out
        )
        text = _SPACES.sub(" ", words).strip()
        if text:
            blocks.append(text)
    line = _SEPARATOR.join(blocks)
    if width is not None and len(line) > width:
        line = line[: max(width - 1, 0)].rstrip() + "…"
    return line
