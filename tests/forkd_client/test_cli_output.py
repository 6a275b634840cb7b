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


def test_a_narrow_terminal_folds_the_flexible_columns_and_drops_none(monkeypatch) -> None:
    """Issue 30 item 4: ``forkd inspect`` under ~170 columns lost FILE and SIZE; now the digests fold."""
    import re

    digest, sha = "blake3:" + "ab" * 32, "sha256:" + "cd" * 32
    for columns in (70, 100, 169):
        monkeypatch.setenv("COLUMNS", str(columns))
        out = FakeTTY()
        Context(Path("/x"), out, io.StringIO()).table(
            ["FILE", "SIZE", "DIGEST", "SHA256"],
            [["memory.bin", "1048576", digest, sha], ["vmstate", "2", digest, sha]],
            right=("SIZE",),
            flexible=("DIGEST", "SHA256"),
        )
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.getvalue().splitlines()]
        assert all(len(line) <= columns for line in lines), lines
        assert lines[0].split()[:2] == ["FILE", "SIZE"]
        assert [line.split()[:2] for line in lines if line.startswith(("memory.bin", "vmstate"))] == [
            ["memory.bin", "1048576"],
            ["vmstate", "2"],
        ]
        folded = "".join(line[len("memory.bin  1048576  ") :].split()[0] for line in lines[1:] if line.strip())
        assert digest in folded  # the whole digest is there, over several lines
