"""The error vocabulary of the ``forkd`` client.

Every error the client raises on purpose derives from :class:`ClientError`, and also from
the stdlib class that says the same thing, so callers may catch either. Messages always
name the snapshot tag, file or path involved; the CLI prints them as
``forkd: error: <message>`` and exits with the code of their class (forkd_client.exitcodes).

    ClientError(Exception)
    ├── InvalidTag               (also ValueError) a tag breaks [A-Za-z0-9_][A-Za-z0-9_-]{0,63}
    ├── SnapshotNotFound         (also LookupError) no snapshot has that tag
    ├── SnapshotExists           (also FileExistsError) the tag is taken (use force to replace)
    ├── DependentsExist          other snapshots chain on it; ``.dependents`` names them
    ├── ChainBroken              a link names a parent that is missing (or the chain loops / is too deep)
    ├── ParentContentMismatch    a parent's memory.bin no longer hashes to what its child recorded
    ├── UnsafeLinkHoles          a link's memory.bin has holes where its parent holds data (forkd maps the parent's bytes)
    ├── FileContentMismatch      a file's bytes no longer hash to what was recorded for it (deep check)
    ├── InvalidSnapshotDir       (also ValueError) a directory is not a usable snapshot (no vmstate …)
    ├── UsageError               (also ValueError) an argument or option value is malformed (CLI exit 2)
    ├── NoSpace                  (also OSError, errno ENOSPC) the disk is full: names the mount point and what to free
    ├── VerificationFailed       content is not what its digest, parent record or signature says (CLI exit 6);
    │                            ParentContentMismatch, FileContentMismatch and hub.errors.DigestInvalid are ones
    └── HubError                 talking to a hub failed (tree in forkd_client.hub.errors)

``Interrupted`` (a ``KeyboardInterrupt``, not a ClientError) carries what can be resumed after
Ctrl-C; the CLI prints it and exits 130.

Errors from lower layers keep their own types: ``manifest.errors.ManifestError`` (including
``manifest.forkd_pack.PackError``) for bad packs and digests, ``OSError`` for filesystem facts
(``ENOSPC``, permissions).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence


class ClientError(Exception):
    """Base of every error the forkd client raises on purpose."""


class InvalidTag(ClientError, ValueError):
    """A snapshot tag does not follow the tag rules."""


class UsageError(ClientError, ValueError):
    """An argument or option value is malformed (e.g. ``--annotation`` without ``=``)."""


class NoSpace(ClientError, OSError):
    """The disk is full: the message names the mount point, what was being written and what to free
    (:mod:`forkd_client.diskspace` builds it). ``errno`` is ``ENOSPC``; ``path`` what was being written."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])


class VerificationFailed(ClientError):
    """Content is not what its digest, its child's parent record or its signature says it must be."""


class SnapshotNotFound(ClientError, LookupError):
    """No local snapshot has the given tag."""

    def __init__(self, tag: str, message: str | None = None) -> None:
        super().__init__(message or f"snapshot {tag!r} not found")
        self.tag = tag


class SnapshotExists(ClientError, FileExistsError):
    """A snapshot with the given tag already exists.

    ``replaceable``: the command that raised it has a ``--force`` that replaces it (import, unpack,
    snapshot, from-image …), and the message says so; the others (tag, snapshot-compact, snapshot-diff)
    never suggest a flag they lack.
    """

    def __init__(self, tag: str, message: str | None = None, *, replaceable: bool = False) -> None:
        remedy = "use --force to replace it" if replaceable else f"remove it first with 'forkd rmi {tag}'"
        super().__init__(message or f"snapshot {tag!r} already exists: choose another tag, or {remedy}")
        self.tag = tag


class DependentsExist(ClientError):
    """The snapshot is the parent of other snapshots, so removing it alone would break them."""

    def __init__(self, tag: str, dependents: Sequence[str]) -> None:
        names = ", ".join(dependents)
        super().__init__(
            f"snapshot {tag!r} is the parent of {len(dependents)} chained snapshot(s): {names}; "
            "use --cascade to remove them too, or --force to remove only this one"
        )
        self.tag = tag
        self.dependents = list(dependents)


class ChainBroken(ClientError):
    """A chain cannot be resolved: ``link`` names parent ``missing``, which does not exist.

    Also raised (with ``missing`` None) when the parents loop or exceed the depth limit.
    """

    def __init__(self, message: str, *, link: str, missing: str | None = None) -> None:
        super().__init__(message)
        self.link = link
        self.missing = missing


class ParentContentMismatch(VerificationFailed):
    """A parent's memory.bin no longer hashes to what its child recorded.

    ``expected`` is the child's ``parent_content_hash`` (lowercase hex sha256; None when the
    child recorded none) or its ``parent_digest`` (``blake3:<hex>``); ``actual`` is the same
    hash of the parent's memory.bin now.
    """

    def __init__(self, child: str, parent: str, expected: str | None, actual: str) -> None:
        if expected is None:
            message = f"snapshot {child!r} records no parent_content_hash for its parent {parent!r}"
        else:
            message = (
                f"snapshot {child!r} expects its parent {parent!r} to have memory.bin "
                f"{expected if expected.startswith('blake3:') else 'sha256 ' + expected}, "
                f"but it is {actual} (the parent changed since the child was made)"
            )
        super().__init__(message)
        self.child = child
        self.parent = parent
        self.expected = expected
        self.actual = actual


class FileContentMismatch(VerificationFailed):
    """A snapshot file's bytes, hashed again in full, are not what its forkd-hub.json records."""

    def __init__(self, tag: str, role: str, expected: str, actual: str) -> None:
        super().__init__(
            f"snapshot {tag!r}: {role} hashes to {actual}, but {expected} was recorded for it "
            "(its content changed or rotted since it was installed)"
        )
        self.tag, self.role, self.expected, self.actual = tag, role, expected, actual


class InvalidSnapshotDir(ClientError, ValueError):
    """A directory cannot be used as a snapshot (missing vmstate/memory.bin, bad metadata)."""


class UnsafeLinkHoles(ClientError):
    """A link's memory.bin has holes where its parent's holds non-zero bytes.

    forkd's daemon assembles a chain by applying only each link's data ranges, so it would
    map the parent's bytes there instead of zeros (links installed before forkd-hub applied
    the hole rule). ``ranges`` are ``(offset, length)``.
    """

    def __init__(self, child: str, parent: str, ranges: Sequence[tuple[int, int]]) -> None:
        total = sum(length for _, length in ranges)
        first = ", ".join(f"{off:#x}+{length}" for off, length in ranges[:3])
        super().__init__(
            f"snapshot {child!r} has holes in memory.bin where its parent {parent!r} holds data "
            f"({total} bytes in {len(ranges)} range(s): {first}{', …' if len(ranges) > 3 else ''}); "
            f"forkd's daemon would map {parent!r}'s bytes there: 'forkd tag {child} NEW' makes a copy "
            "with real zeros (or remove it and pull, unpack or import it again)"
        )
        self.child = child
        self.parent = parent
        self.ranges = list(ranges)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a command; the message says what was kept and how to resume."""
