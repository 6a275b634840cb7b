"""forkd_client.cli.summary: a Markdown description as one plain line (issue 30 item 3)."""

from __future__ import annotations

from forkd_client.cli.summary import one_line


def test_markdown_becomes_one_plain_line() -> None:
    text = "# NumPy 1.26\n\n**Python 3.12** on a [tiny](https://x.example) guest.\n\n- pip ready\n- `uv` installed"
    assert one_line(text) == "NumPy 1.26 · Python 3.12 on a tiny guest. · pip ready · uv installed"


def test_no_newline_control_character_code_block_or_raw_html_survives() -> None:
    text = "first line\nsecond\tline\r\n\n```\nrm -rf /\n```\n\n<b>bold</b> and\x1b]0;title\x07 more"
    line = one_line(text)
    assert "\n" not in line and "\t" not in line and "\r" not in line
    assert line.startswith("first line second line · ") and "rm -rf" not in line and "<b>" not in line
    # other control characters are left to the output layer, which shows them as visible escapes (as in
    # every other cell), so a reader sees that the description carries them
    from forkd_client.cli.output import terminal_safe

    shown = terminal_safe(line)
    assert "\x1b" not in shown and "\x07" not in shown and "\\x1b]0;title\\x07 more" in shown


def test_cut_to_a_width() -> None:
    assert one_line("word " * 40, 20) == "word word word word…" and len(one_line("word " * 40, 20)) == 20
    assert one_line("", 20) == "" and one_line("short", 20) == "short"
