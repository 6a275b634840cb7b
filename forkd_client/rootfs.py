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

**A path that names this host's store never travels** (:func:`travelling_path`): our own copy
``<store root>/rootfs/<sha16>.ext4`` (where unpack falls back) leaves this host, in a pack's
``target_path`` and in a pushed layer's config, as ``/var/cache/forkd/<sha16>.ext4``, the name
every host gives that image (decision 0006, items 3–4). A push uploads no image outside the
snapshot directory (as forkd's push), so :func:`outside_rootfs` says what the push must warn about.

Errors: ``manifest.forkd_pack.PackError`` subclasses (bad table, bad sidecar), OSError.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from manifest.rootfs_sidecar import RootfsInfo, file_sha256, install_sidecar, sidecar_name

from .snapdir import SNAPSHOT_JSON, read_json_object

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


def cache_path(sha256: str) -> str:
    """``/var/cache/forkd/<sha16>.ext4``: the host-independent name of an image without one (forkd's cache)."""
    return str(FORKD_CACHE / f"{sha256[:16]}.ext4")


def is_own_copy(path: str, store_root: Path) -> bool:
    """Whether ``path`` is in ``<store root>/rootfs/``, this store's own copies of pack images (symlinks resolved)."""
    return Path(os.path.realpath(Path(path).parent)) == Path(os.path.realpath(store_root / OWN_DIR))


def travelling_path(path: str, store_root: Path) -> str:
    """The path a rootfs recorded in a snapshot of the store at ``store_root`` goes by on other hosts:
    ``/var/cache/forkd/<name>`` for our own copy ``<store root>/rootfs/<sha16>.ext4`` (named by its
    content there), any other path as recorded."""
    return str(FORKD_CACHE / Path(path).name) if is_own_copy(path, store_root) else path


@dataclass(frozen=True)
class OutsideRootfs:
    """A snapshot's rootfs outside its directory (snapshot.json ``rootfs``): what a push records and warns about."""

    recorded: str  # as snapshot.json names it on this host
    travels_as: str  # the path a pushed config records (:func:`travelling_path`)
    image: Path | None  # the file, when it is on this host


def outside_rootfs(snapshot_dir: Path, doc: dict) -> OutsideRootfs | None:
    """The rootfs ``doc`` (the snapshot.json of ``snapshot_dir``, a store's snapshot) names outside the
    directory, or None (none, or the snapshot's own ``rootfs.ext4``)."""
    recorded = doc.get("rootfs")
    if not isinstance(recorded, str) or not os.path.isabs(recorded) or Path(recorded).parent == snapshot_dir:
        return None
    image = Path(recorded) if Path(recorded).is_file() else None
    return OutsideRootfs(recorded, travelling_path(recorded, snapshot_dir.parent.parent), image)


def push_warning(tag: str, outside: OutsideRootfs) -> str:
    """What ``forkd push`` says of a snapshot whose rootfs is outside its directory: not uploaded, needed there."""
    where = outside.travels_as
    if outside.recorded != where:
        where += f" (this store's copy, {outside.recorded}, is named by its content there)"
    here = "" if outside.image is not None else "; it is not on this host either"
    return (
        f"{tag}: its rootfs image {outside.recorded} is outside the snapshot directory and is not uploaded{here}: "
        f"a host that pulls it needs the image at {where}"
    )


def missing_rootfs_warning(tag: str, snapshot_dir: Path) -> str | None:
    """What ``forkd pull`` says of an installed snapshot whose rootfs outside its directory is not on this
    host (a push never uploads it), or None."""
    outside = outside_rootfs(snapshot_dir, read_json_object(snapshot_dir / SNAPSHOT_JSON) or {})
    if outside is None or outside.image is not None:
        return None
    return (
        f"{tag}: its rootfs image {outside.recorded} is not on this host (a push does not upload an image outside "
        "the snapshot directory): forkd's daemon refuses to spawn it (missing rootfs) until the image is there"
    )


def packed_rootfs(snapshot_dir: Path, doc: dict) -> tuple[Path, str | Callable[[str], str]] | None:
    """``(image, target_path)`` for packing a head's rootfs (the target may be a function of the
    image's sha256), or None when it has none. Never a path into this host's store (module docstring)."""
    inside = snapshot_dir / "rootfs.ext4"
    outside = outside_rootfs(snapshot_dir, doc)
    if outside is not None and outside.image is not None:
        if is_own_copy(outside.recorded, snapshot_dir.parent.parent):
            return outside.image, cache_path
        return outside.image, outside.recorded
    if inside.is_file():
        return inside, cache_path
    return None
