from __future__ import annotations

import io
from pathlib import Path

from forkd_client.cli.output import Context, human_size


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_human_size() -> None:
    assert human_size(0) == "0 B"
    assert human_size(1023) == "1023 B"
    assert human_size(1536) == "1.5 KiB"
    assert human_size(4 << 20) == "4.0 MiB"
    assert human_size(3 << 40) == "3.0 TiB"


def test_plain_table_is_aligned_for_pipes() -> None:
    out = io.StringIO()
    Context(Path("/x"), out, io.StringIO()).table(
        ["NAME", "SIZE"], [["a", "1 B"], ["long-name", "10.0 KiB"]], right=("SIZE",)
    )
    assert out.getvalue().splitlines() == [
        "NAME           SIZE",
        "a               1 B",
        "long-name  10.0 KiB",
    ]


def test_terminal_gets_a_rich_table() -> None:
    out = FakeTTY()
    Context(Path("/x"), out, io.StringIO()).table(["NAME", "SIZE"], [["long-name", "10.0 KiB"]])
    text = out.getvalue()
    assert "NAME" in text and "long-name" in text and "10.0 KiB" in text
