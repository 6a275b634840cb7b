"""Words for people: counts with their noun. Sizes are ``clikit.units.human_size`` (both command lines')."""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: int, singular: str, plural_form: str) -> str:
    """``1 child``, ``2 children``, ``0 children``."""
    return f"{n} {singular if n == 1 else plural_form}"
