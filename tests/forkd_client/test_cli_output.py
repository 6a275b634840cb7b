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


HOSTILE = "desc\x1b]0;pwned\x07\x1b[2J\r\nforkd: error: fake line\x9b31m\u202egnp.exe"


def test_terminal_safe_shows_every_control_character_as_an_escape() -> None:
    from forkd_client.cli.output import terminal_safe

    safe = terminal_safe(HOSTILE)
    assert safe == "desc\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0aforkd: error: fake line\\x9b31m\\u202egnp.exe"
    assert terminal_safe("tabs\tstay, ünïcödé stays") == "tabs\tstay, ünïcödé stays"


def test_print_warn_error_and_tables_never_pass_control_characters(capsys) -> None:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(Path("/x"), out, err)
    ctx.print(f"Description: {HOSTILE}")
    ctx.warn(HOSTILE)
    ctx.error(HOSTILE)
    ctx.table(["NAME", "DESCRIPTION"], [["acme/x", HOSTILE]])
    tty = FakeTTY()
    Context(Path("/x"), tty, io.StringIO()).table(
        ["NAME", "DESCRIPTION"], [["acme/x", "[bold red]spoof[/] " + HOSTILE]]
    )
    for text in (out.getvalue(), err.getvalue()):
        assert not any(c in text for c in "\x1b\x07\r\x9b\u202e")
        assert "fake line" in text and "\\x1b" in text
    assert len(out.getvalue().splitlines()) == 3  # one line per print, two for the table: nothing injected
    assert len(err.getvalue().splitlines()) == 2
    assert "[bold red]spoof[/]" in tty.getvalue()  # rich markup in a cell is shown, not obeyed
    assert not any(c in tty.getvalue() for c in "\x07\x9b\u202e") and "\x1b]0;" not in tty.getvalue()


def test_json_output_escapes_what_a_terminal_would_obey_and_stays_the_same_json() -> None:
    import json

    out = io.StringIO()
    Context(Path("/x"), out, io.StringIO()).json({"description": HOSTILE, "sizes": [1, 2]})
    text = out.getvalue()
    assert not any(c in text for c in "\x1b\x07\r\x9b\u202e")
    assert json.loads(text) == {"description": HOSTILE, "sizes": [1, 2]}


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
