"""Extended attributes of layer entries: read from the tar's pax records, written to the tree through an fd.

Tar carries them as pax records ``SCHILY.xattr.NAME`` (GNU tar, Go's archive/tar, i.e. Docker and
BuildKit) or ``LIBARCHIVE.xattr.NAME`` (URL-encoded name, base64 value). The namespaces ext4 stores are
kept: ``user.``, ``trusted.``, ``security.`` (file capabilities live there) and the POSIX ACLs
``system.posix_acl_access`` / ``system.posix_acl_default``; others are skipped with a note. An entry gets
exactly its declared attributes: ones the host added (inherited default ACLs) are removed. When the host
refuses one (an SELinux policy, a filesystem without ``user.`` support) it is skipped with a note.

Errors: :class:`~forkd_client.images.errors.LimitExceeded` (``max_xattr_bytes``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import os
import tarfile
from collections.abc import Callable
from urllib.parse import unquote

from .errors import LimitExceeded
from .limits import ImageLimits

KEPT_PREFIXES = ("user.", "trusted.", "security.")
KEPT_NAMES = ("system.posix_acl_access", "system.posix_acl_default")
_REFUSED = {errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOSPC, errno.E2BIG, errno.ERANGE}


def entry_xattrs(
    info: tarfile.TarInfo, limits: ImageLimits, layer: int, note: Callable[[str], None]
) -> dict[str, bytes]:
    """The extended attributes ``info`` declares (name → raw value), filtered to what ext4 keeps."""
    found: dict[str, bytes] = {}
    for key, value in info.pax_headers.items():
        if key.startswith("SCHILY.xattr."):
            found[key.removeprefix("SCHILY.xattr.")] = value.encode("utf-8", "surrogateescape")
        elif key.startswith("LIBARCHIVE.xattr."):
            try:
                found[unquote(key.removeprefix("LIBARCHIVE.xattr."))] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                note(f"skipped a malformed LIBARCHIVE.xattr record of /{info.name.lstrip('/')} (layer {layer})")
    if not found:
        return found
    if sum(len(k) + len(v) for k, v in found.items()) > limits.max_xattr_bytes:
        raise LimitExceeded("extended attributes too large", limit="max_xattr_bytes", layer=layer, entry=info.name)
    kept: dict[str, bytes] = {}
    for name, raw in found.items():
        if name.startswith(KEPT_PREFIXES) or name in KEPT_NAMES:
            kept[name] = raw
        else:
            note(f"skipped extended attribute {name!r} of /{info.name.lstrip('/')} (layer {layer})")
    return kept


def set_xattrs(fd: int, wanted: dict[str, bytes], note: Callable[[str], None], label: str) -> None:
    """Make the attributes of the open file ``fd`` exactly ``wanted`` (as far as the host allows)."""
    for name in os.listxattr(fd):
        if name not in wanted:
            with contextlib.suppress(OSError):
                os.removexattr(fd, name)
    for name, value in wanted.items():
        try:
            os.setxattr(fd, name, value)
        except OSError as e:
            if e.errno not in _REFUSED:
                raise
            note(f"could not keep extended attribute {name!r} of {label}: {e.strerror}")
