"""Validation of the names a client sends: repositories, tags, digests, references.

Errors: ``HubError`` with ``NAME_INVALID`` (repository or tag) or ``DIGEST_INVALID``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hub_server.errors import ErrorCode, HubError
from manifest.digest import Digest
from manifest.errors import InvalidDigest

__all__ = ["Reference", "check_digest", "check_repository", "check_tag", "parse_reference"]

_COMPONENT = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
MAX_COMPONENT = 64


def check_repository(namespace: str, name: str) -> str:
    """Return ``namespace/name`` if both parts are valid. Raises HubError(NAME_INVALID)."""
    for what, value in (("namespace", namespace), ("repository name", name)):
        if len(value) > MAX_COMPONENT or not _COMPONENT.fullmatch(value):
            raise HubError(
                ErrorCode.NAME_INVALID,
                f"invalid {what} {value[:80]!r}: use [a-z0-9]+([._-][a-z0-9]+)*, at most {MAX_COMPONENT} characters",
                {"name": f"{namespace}/{name}"[:200]},
            )
    return f"{namespace}/{name}"


def check_tag(tag: str) -> str:
    """Return ``tag`` if valid. Raises HubError(NAME_INVALID)."""
    if not _TAG.fullmatch(tag):
        raise HubError(
            ErrorCode.NAME_INVALID,
            f"invalid tag {tag[:140]!r}: use [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}",
            {"tag": tag[:140]},
        )
    return tag


def parse_digest(text: str) -> Digest:
    """The :class:`Digest` a client sent, parsed once at the seam. Raises HubError(DIGEST_INVALID)."""
    try:
        return Digest.parse(text)
    except InvalidDigest as e:
        raise HubError(ErrorCode.DIGEST_INVALID, str(e), {"digest": str(text)[:140]}) from None


def check_digest(text: str) -> str:
    """Return ``text`` if it is a valid digest. Raises HubError(DIGEST_INVALID)."""
    return str(parse_digest(text))


@dataclass(frozen=True)
class Reference:
    """A ``{ref}`` path segment: exactly one of ``tag`` or ``digest``."""

    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        return self.tag or self.digest or ""


def parse_reference(ref: str) -> Reference:
    """A tag or a digest (anything with ``:`` is a digest). Raises HubError(NAME_INVALID / DIGEST_INVALID)."""
    if ":" in ref:
        return Reference(digest=check_digest(ref))
    return Reference(tag=check_tag(ref))
