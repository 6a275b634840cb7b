"""The error vocabulary of the rootfs builder (:mod:`forkd_client.images`).

Every error derives from :class:`ImageError` (a :class:`~forkd_client.errors.ClientError`) and, where one
fits, from the stdlib class or client class that says the same thing, so a caller may catch either. Each
message names the reference, blob, layer entry or path that was wrong.

    ClientError (forkd_client.errors)
    └── ImageError
        ├── InvalidImageReference  (also UsageError, ValueError) a source string is malformed
        ├── InvalidSetting         (also UsageError, ValueError) a builder option or variable is malformed
        ├── ImageNotFound          (also LookupError) no such layout, archive, tag, manifest or blob
        ├── PlatformNotFound       (also LookupError) no linux/amd64 image; ``.platforms`` lists those present
        ├── UnsupportedImage       (also ValueError) a media type, compression or config this builder does not read
        ├── MalformedImage         (also ValueError) a manifest, index, config or archive index is not valid
        ├── ImageDigestMismatch    (also VerificationFailed) bytes do not hash to their digest (or a layer's diff_id)
        ├── RegistryError          a registry answered with an unexpected status; ``.status``
        │   ├── RegistryUnreachable (also ConnectionError) no answer: refused, DNS, TLS, timeout
        │   └── RegistryAuthFailed  (also PermissionError) 401/403 after the challenge flow, or a refused token
        ├── LayerRejected          (also ValueError) a layer is hostile or broken; ``.layer``, ``.entry``
        │   ├── UnsafePath         a name with ``..``, a parent that climbs out of the root through a symlink,
        │   │                      a hard link to something outside, missing or not a regular file
        │   ├── LimitExceeded      a count or size over :class:`~forkd_client.images.limits.ImageLimits`
        │   │                      (declared, or produced by decompression; also a manifest or config
        │   │                      too large); ``.limit`` names the field
        │   └── CorruptLayer       the layer does not decompress, or is not a tar archive
        ├── ReservedPathInImage    (also ValueError) the image already has ``/.forkd``
        ├── RootfsTooSmall         (also ValueError) an explicit size cannot hold the tree; ``.needed_mib``
        ├── ToolMissing            (also FileNotFoundError) ``mkfs.ext4`` / ``mmdebstrap`` is not installed
        ├── ToolFailed             a tool (mkfs.ext4, e2fsck, mmdebstrap) failed; ``.tool``, the stderr tail
        └── PrivilegeRequired      (also PermissionError) keeping file ownership needs root

``OSError`` for plain filesystem facts (``ENOSPC`` in the cache) passes through unchanged.
"""

from __future__ import annotations

from ..errors import ClientError, UsageError, VerificationFailed


class ImageError(ClientError):
    """Base of every error the rootfs builder raises on purpose."""


class InvalidImageReference(ImageError, UsageError):
    """A source string (``oci:``, ``docker-archive:``, ``HOST/repo[:tag|@digest]``) is malformed."""


class InvalidSetting(ImageError, UsageError):
    """A builder option or environment variable (``FORKD_IMAGE_LIMITS``, a size, an inject path) is malformed."""


class ImageNotFound(ImageError, LookupError):
    """The layout, archive, tag, manifest or blob does not exist."""


class PlatformNotFound(ImageError, LookupError):
    """The image has no ``linux/amd64`` variant; ``platforms`` lists the ones it has."""

    def __init__(self, message: str, platforms: list[str]) -> None:
        super().__init__(message)
        self.platforms = platforms


class UnsupportedImage(ImageError, ValueError):
    """A media type, layer compression or config kind this builder does not read."""


class MalformedImage(ImageError, ValueError):
    """A manifest, index, config or archive index is not valid JSON of the expected shape."""


class ImageDigestMismatch(ImageError, VerificationFailed):
    """Bytes do not hash to the digest that names them (a blob, a manifest, a layer's diff_id)."""

    def __init__(self, what: str, expected: str, actual: str) -> None:
        super().__init__(f"{what}: content hashes to {actual}, but {expected} was expected (refusing to use it)")
        self.what, self.expected, self.actual = what, expected, actual


class RegistryError(ImageError):
    """A registry answered with a status this client cannot use."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class RegistryUnreachable(RegistryError, ConnectionError):
    """No answer from the registry (connection refused, DNS, TLS failure, timeout)."""


class RegistryAuthFailed(RegistryError, PermissionError):
    """The registry refused the credentials, or the token flow failed (401/403)."""


class LayerRejected(ImageError, ValueError):
    """A layer is hostile or broken; nothing was installed. ``layer`` is its index (0 = bottom) and
    ``entry`` the tar entry name (None when the layer as a whole is at fault)."""

    def __init__(self, message: str, *, layer: int | None = None, entry: str | None = None) -> None:
        where = [f"layer {layer}"] if layer is not None else []
        if entry is not None:
            where.append(f"entry {entry!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.layer = layer
        self.entry = entry


class UnsafePath(LayerRejected):
    """An entry's name or link would reach outside the root, or links to something it may not."""


class LimitExceeded(LayerRejected):
    """A count or size went over its limit; ``limit`` is the :class:`ImageLimits` field name."""

    def __init__(self, message: str, *, limit: str, layer: int | None = None, entry: str | None = None) -> None:
        super().__init__(f"{message} (limit {limit}; see docs/images.md to raise it)", layer=layer, entry=entry)
        self.limit = limit


class CorruptLayer(LayerRejected):
    """The layer does not decompress, or is not a tar archive."""


class ReservedPathInImage(ImageError, ValueError):
    """The image already has ``/.forkd``, the directory the builder reserves for the guest agent."""


class RootfsTooSmall(ImageError, ValueError):
    """An explicit rootfs size cannot hold the tree; ``needed_mib`` is the smallest size that would."""

    def __init__(self, message: str, *, needed_mib: int, given_mib: int) -> None:
        super().__init__(message)
        self.needed_mib = needed_mib
        self.given_mib = given_mib


class ToolMissing(ImageError, FileNotFoundError):
    """A host tool the builder runs is not installed."""


class ToolFailed(ImageError):
    """A host tool exited with an error; the message ends with the tail of its stderr."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(f"{tool}: {message}")
        self.tool = tool


class PrivilegeRequired(ImageError, PermissionError):
    """The build must set file ownership (uid/gid of the image's files), which needs root."""
