"""The error table in hub_server/errors.py is the one docs/http-api.md documents."""

from __future__ import annotations

import re
from pathlib import Path

from hub_server.errors import ERRORS, ErrorCode, HubError

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def documented() -> dict[str, int]:
    section = DOC.read_text().split("## Errors", 1)[1].split("\n## ", 1)[0]
    return {code: int(status) for code, status in re.findall(r"^\| `([A-Z_]+)` \| (\d{3}) \|", section, re.M)}


def test_every_code_is_documented_with_its_status():
    assert documented() == {str(code): spec.status for code, spec in ERRORS.items()}


def test_hub_error_envelope():
    e = HubError(ErrorCode.TOO_LARGE, detail={"limit": 5})
    assert e.status == 413
    assert e.to_wire() == {
        "errors": [{"code": "TOO_LARGE", "message": "request is over its size limit", "detail": {"limit": 5}}]
    }
    assert HubError("NAME_UNKNOWN", "x").code is ErrorCode.NAME_UNKNOWN
