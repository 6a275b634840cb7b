"""Tag patterns: a comma-separated list of shell-style globs over tag names (``latest,nightly-*``).

Used by the immutable-tags exemption and by retention (``registry/content/policy.py``). A glob uses the
tag characters ``[A-Za-z0-9._-]`` plus ``*`` (any run), ``?`` (one character) and ``[…]``
(one of a set); matching is case-sensitive, like tags.

Errors: :class:`TagGlobError` (a ``ValueError``) naming the bad entry.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

__all__ = ["MAX_GLOBS_TEXT", "TagGlobError", "TagGlobs"]

MAX_GLOBS_TEXT = 256
_GLOB = re.compile(r"[A-Za-z0-9._\-*?\[\]!]{1,128}")


class TagGlobError(ValueError):
    """A tag pattern list is malformed; the message names the entry."""


@dataclass(frozen=True)
class TagGlobs:
    """Parsed globs; an empty list matches no tag."""

    globs: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> TagGlobs:
        """Parse ``a,b*,c?`` (spaces around entries ignored). Raises TagGlobError."""
        text = (text or "").strip()
        if len(text) > MAX_GLOBS_TEXT:
            raise TagGlobError(f"tag patterns are over {MAX_GLOBS_TEXT} characters")
        globs: list[str] = []
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            if not _GLOB.fullmatch(entry) or entry.count("[") != entry.count("]"):
                raise TagGlobError(
                    f"invalid tag pattern {entry[:140]!r}: use tag characters [A-Za-z0-9._-] with * ? [...]"
                )
            globs.append(entry)
        return cls(tuple(dict.fromkeys(globs)))

    def matches(self, tag: str) -> bool:
        return any(fnmatch.fnmatchcase(tag, glob) for glob in self.globs)

    def __str__(self) -> str:
        return ",".join(self.globs)
