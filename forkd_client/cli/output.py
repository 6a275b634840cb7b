"""What every command shares: the run context, tables, sizes and JSON output.

Tables are drawn with rich when stdout is a terminal and as plain, space-aligned text
otherwise (pipes, files, tests), so scripts can ``awk`` them. ``--json`` output is always
plain JSON with sizes in bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from clikit.units import human_size

from ..store import SnapshotStore

__all__ = ["Context", "human_size"]


@dataclass
class Context:
    """Where a command reads and writes: the store root and the two output streams."""

    home: Path
    stdout: TextIO
    stderr: TextIO

    def store(self) -> SnapshotStore:
        return SnapshotStore(self.home)

    def print(self, text: str = "") -> None:
        print(text, file=self.stdout)

    def warn(self, text: str) -> None:
        print(f"forkd: warning: {text}", file=self.stderr)

    def error(self, text: str) -> None:
        print(f"forkd: error: {text}", file=self.stderr)

    def json(self, obj: Any) -> None:
        self.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")

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
        if _isatty(self.stdout):
            from rich.console import Console
            from rich.table import Table

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
                table.add_row(*row)
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
