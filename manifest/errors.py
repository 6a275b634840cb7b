"""The error vocabulary of the ``manifest`` package.

Every error raised by this package derives from :class:`ManifestError`, itself a
``ValueError`` because every one of them means "these bytes or these arguments are
not acceptable". Messages always name the offending thing (digest, file, chunk index,
tag) so a user can act on them without a stack trace.

    ManifestError(ValueError)
    ├── InvalidDigest          a digest string is malformed or uses an unknown algorithm
    ├── DigestMismatch         bytes do not hash to the digest they were named by
    ├── InvalidChunkSize       chunk size is not a power of two in [4 KiB, 16 MiB]
    ├── InvalidManifest        a manifest / config / chunk map document is not valid
    ├── AssemblyError          a file could not be assembled from parent + chunk map
    ├── ChainError             a chain of layers cannot be resolved
    │   ├── ChainCycle         following parents loops back onto the chain
    │   ├── ChainTooDeep       more links than the depth limit
    │   └── MissingParent      (also LookupError) a named parent cannot be found
    └── PackError              (manifest.forkd_pack) a forkd pack is unacceptable
"""

from __future__ import annotations


class ManifestError(ValueError):
    """Base of every error raised by :mod:`manifest`."""


class InvalidDigest(ManifestError):
    """A digest string is malformed (``algorithm:hex``) or its algorithm is unsupported."""


class DigestMismatch(ManifestError):
    """Content does not hash to the digest it was expected to have."""

    def __init__(self, what: str, expected: str, actual: str) -> None:
        super().__init__(f"{what}: digest mismatch: expected {expected}, got {actual}")
        self.what = what
        self.expected = expected
        self.actual = actual


class InvalidChunkSize(ManifestError):
    """A chunk size is not a power of two between 4 KiB and 16 MiB."""


class InvalidManifest(ManifestError):
    """A manifest, config or chunk-map document does not follow docs/manifest-format.md."""


class AssemblyError(ManifestError):
    """A file could not be assembled (missing chunk, wrong size, bad parent)."""


class ChainError(ManifestError):
    """A chain of snapshot layers cannot be resolved."""


class ChainCycle(ChainError):
    """Following parent links leads back to a link already on the chain."""


class ChainTooDeep(ChainError):
    """The chain has more links than the configured depth limit."""


class MissingParent(ChainError, LookupError):
    """A link names a parent that cannot be found."""
