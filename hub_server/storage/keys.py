"""Storage keys: what a valid key is, and how prefixes match keys.

A key is a relative, ``/``-separated path such as ``blobs/blake3/ab/abcd…``. The rules are
the intersection of what a POSIX filesystem and S3 can both store without surprises, so a
layout that works on one backend works on all of them.
"""

from __future__ import annotations

from .errors import InvalidKey

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_SEGMENT_BYTES",
    "RESERVED_PREFIX",
    "is_under",
    "validate_key",
    "validate_prefix",
]

MAX_KEY_BYTES = 1024
"""S3's limit on an object key, in UTF-8 bytes."""

MAX_SEGMENT_BYTES = 255
"""The common filesystem limit on one path component (NAME_MAX), in bytes."""

RESERVED_PREFIX = "_"
"""Top-level segments starting with this are private to backends (e.g. ``_staging``)."""


def validate_key(key: str) -> str:
    """Return ``key`` unchanged if it is a valid storage key.

    A valid key is a ``str`` of at most 1024 UTF-8 bytes made of ``/``-separated segments;
    each segment is non-empty, at most 255 bytes, not ``.`` or ``..``, and made of printable
    characters other than ``\\``. The key has no leading or trailing ``/`` and its first
    segment does not start with ``_`` (reserved for backend bookkeeping).

    Raises:
        InvalidKey: naming the rule the key breaks.
    """
    if not isinstance(key, str):
        raise InvalidKey(repr(key), f"a key must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidKey(key, "empty key")
    _check_path(key, what="key")
    return key


def validate_prefix(prefix: str) -> str:
    """Normalise a listing prefix: ``""`` (everything) or a valid key, one trailing ``/`` allowed.

    Raises:
        InvalidKey: if the prefix, without its trailing ``/``, is not a valid key.
    """
    if not isinstance(prefix, str):
        raise InvalidKey(repr(prefix), f"a prefix must be a str, not {type(prefix).__name__}")
    stripped = prefix[:-1] if prefix.endswith("/") else prefix
    if stripped:
        _check_path(stripped, what="prefix")
    elif prefix:
        raise InvalidKey(prefix, "a prefix cannot be just '/'")
    return stripped


def is_under(key: str, prefix: str) -> bool:
    """Whether ``key`` is selected by the normalised ``prefix``.

    Prefixes match whole segments: ``a/b`` selects ``a/b`` and ``a/b/…`` but not ``a/bc``.
    """
    return not prefix or key == prefix or key.startswith(prefix + "/")


def _check_path(key: str, *, what: str) -> None:
    try:
        encoded_size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidKey(key, f"the {what} is not encodable as UTF-8") from None
    if encoded_size > MAX_KEY_BYTES:
        raise InvalidKey(key, f"the {what} is {encoded_size} bytes; the limit is {MAX_KEY_BYTES}")
    if key.startswith("/"):
        raise InvalidKey(key, f"the {what} must be relative (no leading '/')")
    if "\\" in key:
        raise InvalidKey(key, "backslash is not allowed")
    if not key.isprintable():
        raise InvalidKey(key, "control and other non-printable characters are not allowed")
    segments = key.split("/")
    for segment in segments:
        if not segment:
            raise InvalidKey(key, "empty path segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise InvalidKey(key, f"'{segment}' segments are not allowed")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise InvalidKey(key, f"a segment is longer than {MAX_SEGMENT_BYTES} bytes")
    if segments[0].startswith(RESERVED_PREFIX):
        raise InvalidKey(key, f"top-level names starting with {RESERVED_PREFIX!r} are reserved")
