"""What every command shares: the run context, tables, sizes and JSON output.

Tables are drawn with rich when stdout is a terminal and as plain, space-aligned text
otherwise (pipes, files, tests), so scripts can ``awk`` them. ``--json`` output is always
plain JSON with sizes in bytes.

Everything a command prints goes through :class:`Context`, and that is the one place text from
elsewhere (a hub's descriptions, annotations, compat values, error messages; a pulled snapshot's
annotations) is made safe for a terminal: :func:`terminal_safe` shows control characters (escape
sequences that set a window title or clear the screen, carriage returns and newlines that print
fake lines, C1 controls, bidirectional overrides) as visible escapes, and tables never read rich
markup from a cell. JSON output escapes the same characters as ``\\uXXXX`` (still the same JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from clikit.units import human_size

if TYPE_CHECKING:
    from ..store import SnapshotStore

__all__ = ["Context", "human_size", "terminal_safe"]

#: What a terminal acts on instead of showing: C0 controls but tab, DEL, C1 controls, and the
#: invisible bidirectional overrides and isolates that reorder what a line appears to say.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on shown as an escape (``\\x1b``, ``\\n``
    as ``\\x0a``, ``\\u202e``): one line, exactly as long as it looks."""
    return _UNSAFE.sub(_visible, text)


#: What json.dumps leaves raw of those (it escapes C0 itself, and the layout's newlines are not in strings).
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _json_safe(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


@dataclass
class Context:
    """Where a command reads and writes: the store root and the two output streams."""

    home: Path
    stdout: TextIO
    stderr: TextIO

    def store(self) -> SnapshotStore:
        from ..store import SnapshotStore  # imported when a command opens the store, not by ``forkd --help``

        return SnapshotStore(self.home)

    def print(self, text: str = "") -> None:
        """One line on stdout (control characters shown as escapes, :func:`terminal_safe`)."""
        print(terminal_safe(text), file=self.stdout)

    def warn(self, text: str) -> None:
        print(f"forkd: warning: {terminal_safe(text)}", file=self.stderr)

    def error(self, text: str) -> None:
        print(f"forkd: error: {terminal_safe(text)}", file=self.stderr)

    def json(self, obj: Any) -> None:
        # json.dumps escapes C0 controls; C1 controls and bidi overrides it leaves raw, so escape them too
        self.stdout.write(_JSON_UNSAFE.sub(_json_safe, json.dumps(obj, indent=2, ensure_ascii=False)) + "\n")

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        right: Sequence[str] = (),
        flexible: Sequence[str] = (),
    ) -> None:
        """Print rows under headers; columns named in ``right`` are right-aligned (numbers).

        On a terminal narrower than the table, the columns named in ``flexible`` (long digests,
        descriptions) fold onto several lines; every other column keeps its full width, so none is
        ever dropped (rich would otherwise squeeze a column to nothing). Pipes get every cell whole."""
        rows = [[terminal_safe(cell) for cell in row] for row in rows]
        if _isatty(self.stdout):
            from rich.console import Console
            from rich.table import Table
            from rich.text import Text

            table = Table(box=None, header_style="bold", pad_edge=False)
            for i, h in enumerate(headers):
                widest = max([len(h), *(len(r[i]) for r in rows if i < len(r))])
                table.add_column(
                    h,
                    justify="right" if h in right else "left",
                    no_wrap=h not in flexible,
                    overflow="fold" if h in flexible else "ellipsis",
                    min_width=min(len(h), 12) if h in flexible else widest,
                )
            for row in rows:
                table.add_row(*(Text(cell) for cell in row))  # Text: a cell's "[red]" is shown, not obeyed
            Console(file=self.stdout).print(table)
            return
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

        def line(cells: Sequence[str]) -> str:
            parts = [c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(cells, widths, headers, strict=False)]
            return "  ".join(parts).rstrip()

        self.print(line(headers))
        for row in rows:
            self.print(line(row))


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
