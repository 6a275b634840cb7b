"""Where a pack's rootfs image goes on this host, and how a snapshot's rootfs is packed.

forkd's unpack writes the sidecar image to the pack's ``rootfs.target_path``, any absolute
path the pack's author chose (/work/shared/reference/forkd-formats.md §4.3: an arbitrary-path
write). We place it where forkd would only when that path lies inside an **allowed root**:

- ``<store root>/rootfs/`` (ours), and
- ``$FORKD_ROOTFS_DIRS`` (``os.pathsep``-separated), default ``/var/cache/forkd`` (forkd's
  ``from-image`` cache, where forkd's own rootfs images live).

Anywhere else, or when the target holds a different image, or cannot be written, the image
goes to ``<store root>/rootfs/<sha16>.ext4`` instead and ``snapshot.json`` names that: content
never chooses a host path, and an existing file is never replaced.

Packing mirrors forkd: the head's rootfs travels as the sidecar ``<sha16>.rootfs.zst`` beside
the pack, ``snapshot.json`` ``rootfs`` and manifest ``target_path`` naming where it belongs: the
recorded path for an image outside the snapshot directory (forkd's case), else
``/var/cache/forkd/<sha16>.ext4`` (a rootfs.ext4 inside the directory has no host-independent
path; forkd's unpack never rewrites ``rootfs``).

Errors: ``manifest.forkd_pack.PackError`` subclasses (bad table, bad sidecar), OSError.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from manifest.rootfs_sidecar import RootfsInfo, file_sha256, install_sidecar, sidecar_name

ROOTFS_DIRS_ENV = "FORKD_ROOTFS_DIRS"
FORKD_CACHE = Path("/var/cache/forkd")
OWN_DIR = "rootfs"


def allowed_roots(store_root: Path) -> list[Path]:
    """Directories a pack's rootfs may be written into (see module docstring)."""
    extra = os.environ.get(ROOTFS_DIRS_ENV)
    dirs = [Path(d) for d in extra.split(os.pathsep) if d] if extra is not None else [FORKD_CACHE]
    return [store_root / OWN_DIR, *(d for d in dirs if d.is_absolute())]


def own_path(store_root: Path, sha256: str) -> Path:
    """Our content-addressed place for an image: ``<root>/rootfs/<sha16>.ext4``."""
    return store_root / OWN_DIR / f"{sha256[:16]}.ext4"


def is_allowed(path: str, store_root: Path) -> bool:
    """Whether ``path`` is a plain absolute path whose directory is inside an allowed root
    (symlinks resolved, no ``..``)."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or "\0" in path:
        return False
    parent = Path(os.path.realpath(Path(path).parent))
    for root in allowed_roots(store_root):
        real = Path(os.path.realpath(root))
        if parent == real or real in parent.parents:
            return True
    return False


def _holds(path: Path, info: RootfsInfo) -> bool:
    try:
        return path.is_file() and path.stat().st_size == info.size and file_sha256(path) == info.sha256
    except OSError:
        return False


def place_rootfs(store_root: Path, info: RootfsInfo, sidecar_dir: Path, warnings: list[str] | None) -> Path | None:
    """Install the image described by ``info`` from ``sidecar_dir/<sha16>.rootfs.zst``; returns
    where it now is (or already was), or None when the sidecar is missing (forkd only warns).
    Raises PackHashMismatch, PackTooLarge, CorruptPack, OSError."""
    candidates = [Path(info.target_path)] if is_allowed(info.target_path, store_root) else []
    candidates.append(own_path(store_root, info.sha256))
    for path in candidates:
        if _holds(path, info):
            return path  # shared with other snapshots: reused, as forkd does
    sidecar = sidecar_dir / sidecar_name(info.sha256)
    if not sidecar.is_file():
        if warnings is not None:
            warnings.append(
                f"rootfs sidecar {sidecar.name} not found next to the pack; the snapshot's "
                f"rootfs {info.target_path} must be provided on this host"
            )
        return None
    for path in candidates:
        if os.path.lexists(path) and path != candidates[-1]:
            continue  # never replace a file someone else may use
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            install_sidecar(sidecar, path, info)
            return path
        except PermissionError:
            continue
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES) or path == candidates[-1]:
                raise
    raise PermissionError(errno.EACCES, f"cannot write the rootfs image to {candidates[-1]}")


def packed_rootfs(snapshot_dir: Path, doc: dict) -> tuple[Path, str | Callable[[str], str]] | None:
    """``(image, target_path)`` for packing a head's rootfs (the target may be a function of the
    image's sha256), or None when it has none."""
    inside = snapshot_dir / "rootfs.ext4"
    recorded = doc.get("rootfs")
    if (
        isinstance(recorded, str)
        and os.path.isabs(recorded)
        and Path(recorded).parent != snapshot_dir
        and Path(recorded).is_file()
    ):
        return Path(recorded), recorded
    if inside.is_file():
        return inside, lambda sha: str(FORKD_CACHE / f"{sha[:16]}.ext4")
    return None
