"""``loads``: ``json.loads`` for bytes that come from someone else.

The standard parser recurses once per nesting level, so a few kilobytes of ``[[[[…`` raise
``RecursionError``, which callers do not expect and which surfaces as a 500 or an "internal
error". Here it becomes :class:`JSONTooDeep`, a ``json.JSONDecodeError``, so every caller that
already refuses invalid JSON refuses it with the same typed error.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JSONTooDeep", "loads"]


class JSONTooDeep(json.JSONDecodeError):
    """A JSON document nested deeper than the parser can follow."""

    def __init__(self, doc: str) -> None:
        super().__init__("JSON is nested too deeply", doc, 0)

    def __str__(self) -> str:
        return "JSON is nested too deeply"


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON text, whatever its nesting.

    Raises: json.JSONDecodeError (:class:`JSONTooDeep` for too deep nesting); UnicodeDecodeError.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        return json.loads(data)
    except RecursionError:
        raise JSONTooDeep("") from None
