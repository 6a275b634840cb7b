"""Apply image layers into a directory as a container runtime would (the OCI image spec's layer rules).

:func:`apply_layers` builds the tree in a fresh ``.NAME.*.partial`` directory next to ``dest`` and renames
it to ``dest`` only when every layer applied; on any error the partial tree is removed, so a refused
image leaves nothing behind. Within a layer, in tar order:

- ``.wh.NAME`` removes ``NAME`` of the lower layers; ``.wh..wh..opq`` empties its directory of everything
  the lower layers put there. Entries of the same layer survive both, whatever their order in the tar.
  Other ``.wh..wh.*`` names (AUFS bookkeeping) are skipped with a note.
- Regular files, directories, symlinks and hard links are created with the entry's mode (setuid, setgid
  and sticky bits included), numeric uid/gid, mtime and extended attributes (``user.``, ``trusted.``,
  ``security.``, POSIX ACLs; not on symlinks). An entry replaces what was at its path, except a directory
  over a directory, which keeps its contents and takes the new metadata. A directory's mtime is restored
  after the layer, so adding to it does not change it; directories nobody declared (the root, missing
  parents) get mode 0755, owner 0:0 and mtime 0.
- Device nodes and fifos are skipped with a note (the guest's devtmpfs provides /dev).
- A hard link's target may come from this or a lower layer and must be a regular file already in the tree.
- Each layer's uncompressed bytes are hashed; a mismatch with the config's ``rootfs.diff_ids`` is refused.

Hostile input is refused with a typed error naming the layer and entry (docs/images.md, "Hostile input"):
a name with a ``..`` component (a leading ``/`` is stripped, as tar does), a parent that climbs out of the
root through a symlink (symlinks are resolved inside the root, see :mod:`.rootdir`), a hard link to a
missing, outside or non-regular target, an entry replacing the root with a non-directory, uid/gid out of
range, and anything over :class:`~forkd_client.images.limits.ImageLimits`.

Errors: :class:`UnsafePath`, :class:`LimitExceeded`, :class:`CorruptLayer`, :class:`LayerRejected`,
:class:`ImageDigestMismatch`, :class:`PrivilegeRequired` (not root); OSError for host facts (ENOSPC).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from .errors import ImageDigestMismatch, LayerRejected, LimitExceeded, PrivilegeRequired, UnsafePath
from .limits import DEFAULT_LIMITS, ImageLimits
from .progress import Progress, no_progress
from .rootdir import DIR_FLAGS, Path_, RootDir, lstat_at
from .tarstream import Budget, DecompressedStream, tar_entries
from .xattrs import entry_xattrs, set_xattrs

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_MAX_ID = 2**32 - 2
_MAX_NOTES = 100
_CHUNK = 1 << 20
_ZEROS = memoryview(bytes(_CHUNK))
_REPORT_EVERY = 8 << 20
#: errno values that mean "this entry cannot be made as asked" rather than a host problem
_ENTRY_ERRNOS = {errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EINVAL, errno.EMLINK}


@dataclass(frozen=True)
class LayerInput:
    """A verified layer blob; ``diff_id`` (``sha256:…`` of the uncompressed tar) is checked when given."""

    path: Path
    digest: str | None = None
    diff_id: str | None = None


@dataclass
class ApplyReport:
    """What applying the layers did. ``notes`` say what was skipped (devices, AUFS files, xattrs)."""

    entries: int = 0
    unpacked_bytes: int = 0
    decompressed_bytes: int = 0
    diff_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def split_name(name: str, limits: ImageLimits, layer: int) -> Path_:
    """An entry name as path components: ``/`` and ``.`` dropped, ``..`` refused, lengths checked."""
    if len(name.encode("utf-8", "surrogateescape")) > limits.max_path_bytes:
        raise LimitExceeded(
            f"a name of more than {limits.max_path_bytes} bytes", limit="max_path_bytes", layer=layer, entry=name[:200]
        )
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise UnsafePath("the name has a '..' component", layer=layer, entry=name)
    for part in parts:
        if len(part.encode("utf-8", "surrogateescape")) > limits.max_name_bytes:
            raise LimitExceeded(
                f"a path component of more than {limits.max_name_bytes} bytes",
                limit="max_name_bytes",
                layer=layer,
                entry=name,
            )
    return parts


def apply_layers(
    layers: Sequence[LayerInput], dest: Path, *, limits: ImageLimits = DEFAULT_LIMITS, progress: Progress = no_progress
) -> ApplyReport:
    """Apply ``layers`` (bottom first) into the new directory ``dest`` (which must not exist), all or nothing.

    Raises the errors of the module docstring; on any of them nothing is left at or next to ``dest``.
    """
    if os.geteuid() != 0:
        raise PrivilegeRequired("applying image layers keeps their files' owners and setuid bits, which needs root")
    if len(layers) > limits.max_layers:
        raise LimitExceeded(f"{len(layers)} layers", limit="max_layers")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        report = _Applier(staging, limits, progress).run(layers)
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return report


class _Applier:
    def __init__(self, tree: Path, limits: ImageLimits, progress: Progress) -> None:
        self.tree = tree
        self.limits = limits
        self.progress = progress
        self.budget = Budget(limits)
        self.report = ApplyReport()
        self.layer = 0
        self.entry = ""
        self.layer_paths: set[Path_] = set()  # this layer's entries and their ancestors
        self.dir_times: dict[Path_, int] = {}  # directories whose mtime is (re)set when the layer ends

    def run(self, layers: Sequence[LayerInput]) -> ApplyReport:
        total = sum(layer.path.stat().st_size for layer in layers)
        done = 0
        self.root = RootDir(self.tree, max_symlink_hops=self.limits.max_symlink_hops)
        try:
            os.chmod(self.root.fd, 0o755)
            os.utime(self.root.fd, ns=(0, 0))
            for index, layer in enumerate(layers):
                self.layer = self.root.layer = index
                with open(layer.path, "rb") as raw:
                    stream = DecompressedStream(raw, self.budget, index)
                    reported = 0
                    for info, tar in tar_entries(stream, self.budget, index):
                        self._entry(info, tar)
                        if raw.tell() - reported >= _REPORT_EVERY:
                            reported = raw.tell()
                            self.progress("apply", done + reported, total)
                    diff_id = stream.drain()
                    done += raw.tell()
                self._end_layer()
                self.report.diff_ids.append(diff_id)
                if layer.diff_id is not None and diff_id != layer.diff_id:
                    raise ImageDigestMismatch(f"layer {index} ({layer.digest}) uncompressed", layer.diff_id, diff_id)
                self.progress("apply", done, total)
        finally:
            self.root.close()
        self.report.entries = self.budget.entries
        self.report.unpacked_bytes = self.budget.unpacked
        self.report.decompressed_bytes = self.budget.decompressed
        return self.report

    # --- one entry ----------------------------------------------------------------------------------

    def _entry(self, info: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        self.entry = info.name
        try:
            self._apply_entry(info, tar)
        except OSError as e:
            if e.errno in _ENTRY_ERRNOS:
                raise LayerRejected(f"cannot be created: {e.strerror}", layer=self.layer, entry=info.name) from None
            raise

    def _apply_entry(self, info: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        parts = split_name(info.name, self.limits, self.layer)
        if parts and parts[-1].startswith(WHITEOUT):
            self._whiteout(parts)
            return
        if info.ischr() or info.isblk() or info.isfifo():
            kind = "fifo" if info.isfifo() else "character device" if info.ischr() else "block device"
            self._note(f"skipped {kind} /{'/'.join(parts)} (layer {self.layer})")
            return
        if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
            self._note(f"skipped /{'/'.join(parts)}: tar entry type {info.type!r} (layer {self.layer})")
            return
        for label, value in (("uid", info.uid), ("gid", info.gid)):
            if not 0 <= value <= _MAX_ID:
                raise LayerRejected(f"{label} {value} is out of range", layer=self.layer, entry=info.name)
        if not parts:
            if not info.isdir():
                raise UnsafePath(
                    "refusing to replace the root directory with a non-directory", layer=self.layer, entry=info.name
                )
            self._set_meta(self.root.fd, info)
            self.dir_times[()] = _mtime_ns(info)
            return
        hit = self.root.resolve_dir(parts[:-1], create=self._implicit_dir, entry=info.name)
        assert hit is not None  # with create, every component exists
        pfd, pcanon = hit
        base = parts[-1]
        existing = lstat_at(pfd, base)
        if info.isdir():
            if existing is None or not stat.S_ISDIR(existing.st_mode):
                self._replace(pfd, pcanon, base, existing)
                os.mkdir(base, 0o700, dir_fd=pfd)
            fd = os.open(base, DIR_FLAGS, dir_fd=pfd)
            try:
                self._set_meta(fd, info)
            finally:
                os.close(fd)
            self.dir_times[(*pcanon, base)] = _mtime_ns(info)
        elif info.isreg():
            self._regular(pfd, pcanon, base, existing, info, tar)
        elif info.issym():
            self._symlink(pfd, pcanon, base, existing, info)
        else:
            self._hardlink(pfd, pcanon, base, existing, info)
        path = (*pcanon, base)
        for i in range(len(path) + 1):
            self.layer_paths.add(path[:i])

    def _replace(self, pfd: int, pcanon: Path_, base: str, existing: os.stat_result | None) -> None:
        """Make room for a new entry ``base`` in ``pfd``: the parent's mtime is kept, the old entry removed."""
        self._touch(pfd, pcanon)
        if existing is not None:
            self.root.remove(pfd, base)

    def _regular(
        self,
        pfd: int,
        pcanon: Path_,
        base: str,
        existing: os.stat_result | None,
        info: tarfile.TarInfo,
        tar: tarfile.TarFile,
    ) -> None:
        left = self.limits.max_unpacked_bytes - self.budget.unpacked
        if info.size > left:
            raise LimitExceeded(
                f"a file of {info.size} bytes does not fit in what is left of max_unpacked_bytes ({left})",
                limit="max_unpacked_bytes",
                layer=self.layer,
                entry=info.name,
            )
        self.budget.unpacked += info.size
        self._replace(pfd, pcanon, base, existing)
        fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=pfd)
        try:
            source = tar.extractfile(info)
            assert source is not None  # a regular file always has data
            while chunk := source.read(_CHUNK):
                if chunk == _ZEROS[: len(chunk)]:
                    os.lseek(fd, len(chunk), os.SEEK_CUR)  # a hole: zeros cost no disk, and mkfs skips them
                    continue
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            os.ftruncate(fd, info.size)
            self._set_meta(fd, info)
        finally:
            os.close(fd)

    def _symlink(
        self, pfd: int, pcanon: Path_, base: str, existing: os.stat_result | None, info: tarfile.TarInfo
    ) -> None:
        target = info.linkname
        if not target or len(target.encode("utf-8", "surrogateescape")) > self.limits.max_path_bytes:
            raise LimitExceeded(
                "a symlink target that is empty or too long", limit="max_path_bytes", layer=self.layer, entry=info.name
            )
        self._replace(pfd, pcanon, base, existing)
        os.symlink(target, base, dir_fd=pfd)
        os.chown(base, info.uid, info.gid, dir_fd=pfd, follow_symlinks=False)
        mtime = _mtime_ns(info)
        os.utime(base, ns=(mtime, mtime), dir_fd=pfd, follow_symlinks=False)
        if entry_xattrs(info, self.limits, self.layer, self._note):
            self._note(f"skipped the extended attributes of symlink /{'/'.join((*pcanon, base))} (layer {self.layer})")

    def _hardlink(
        self, pfd: int, pcanon: Path_, base: str, existing: os.stat_result | None, info: tarfile.TarInfo
    ) -> None:
        tparts = split_name(info.linkname, self.limits, self.layer)
        if not tparts:
            raise UnsafePath("a hard link to the root directory", layer=self.layer, entry=info.name)
        thit = self.root.resolve_dir(tparts[:-1], entry=info.name)
        target = lstat_at(thit[0], tparts[-1]) if thit is not None else None
        if thit is None or target is None:
            raise UnsafePath(
                f"a hard link to {info.linkname!r}, which is not in the tree", layer=self.layer, entry=info.name
            )
        if not stat.S_ISREG(target.st_mode):
            raise UnsafePath(
                f"a hard link to {info.linkname!r}, which is not a regular file", layer=self.layer, entry=info.name
            )
        if existing is not None and (existing.st_dev, existing.st_ino) == (target.st_dev, target.st_ino):
            return
        self._replace(pfd, pcanon, base, existing)
        try:
            os.link(tparts[-1], base, src_dir_fd=thit[0], dst_dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            raise UnsafePath(
                f"a hard link to {info.linkname!r}, which its own path replaced", layer=self.layer, entry=info.name
            ) from None

    def _implicit_dir(self, parent_fd: int, parent: Path_, name: str) -> None:
        self._touch(parent_fd, parent)
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        try:
            os.fchown(fd, 0, 0)
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)
        self.dir_times[(*parent, name)] = 0

    def _set_meta(self, fd: int, info: tarfile.TarInfo) -> None:
        os.fchown(fd, info.uid, info.gid)
        os.fchmod(fd, info.mode & 0o7777)  # after chown, which clears setuid/setgid
        set_xattrs(fd, entry_xattrs(info, self.limits, self.layer, self._note), self._note, f"/{info.name.lstrip('/')}")
        if not info.isdir():
            mtime = _mtime_ns(info)
            os.utime(fd, ns=(mtime, mtime))

    def _touch(self, fd: int, path: Path_) -> None:
        """Remember the directory's mtime before this layer changes what it holds."""
        if path not in self.dir_times:
            self.dir_times[path] = os.fstat(fd).st_mtime_ns

    # --- whiteouts ----------------------------------------------------------------------------------

    def _whiteout(self, parts: Path_) -> None:
        base = parts[-1]
        if base != OPAQUE and base.startswith(OPAQUE[:8]):
            self._note(f"skipped AUFS metadata /{'/'.join(parts)} (layer {self.layer})")
            return
        victim = None if base == OPAQUE else base[len(WHITEOUT) :]
        if victim in ("", ".", ".."):
            raise UnsafePath("a whiteout that names no entry", layer=self.layer, entry=self.entry)
        try:
            hit = self.root.resolve_dir(parts[:-1], entry=self.entry)
        except UnsafePath:
            raise
        except LayerRejected:
            return  # a parent that is not a directory holds nothing to hide
        if hit is None:
            return
        pfd, pcanon = hit
        if victim is None:
            self._remove_lower_children(pfd, pcanon)
        elif lstat_at(pfd, victim) is not None:
            self._remove_lower(pfd, pcanon, victim)

    def _remove_lower(self, pfd: int, pcanon: Path_, name: str) -> None:
        path = (*pcanon, name)
        if path not in self.layer_paths:
            self._touch(pfd, pcanon)
            self.root.remove(pfd, name)
            return
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(name, DIR_FLAGS, dir_fd=pfd)
            try:
                self._remove_lower_children(fd, path)
            finally:
                os.close(fd)

    def _remove_lower_children(self, dfd: int, dpath: Path_) -> None:
        for child in sorted(os.listdir(dfd)):
            self._remove_lower(dfd, dpath, child)

    # --- bookkeeping --------------------------------------------------------------------------------

    def _end_layer(self) -> None:
        for path, mtime in self.dir_times.items():
            fd = self.root.open_canonical(path)
            if fd is None:
                continue  # removed later in the layer
            try:
                os.utime(fd, ns=(mtime, mtime))
            finally:
                os.close(fd)
        self.dir_times.clear()
        self.layer_paths.clear()

    def _note(self, text: str) -> None:
        if len(self.report.notes) < _MAX_NOTES:
            self.report.notes.append(text)
        elif len(self.report.notes) == _MAX_NOTES:
            self.report.notes.append("… (further notes omitted)")


def _mtime_ns(info: tarfile.TarInfo) -> int:
    """The entry's mtime in nanoseconds, exact from a pax ``mtime`` record (tarfile keeps only a float)."""
    text = info.pax_headers.get("mtime")
    with contextlib.suppress(ArithmeticError, ValueError):
        if text:
            return int(Decimal(text) * 1_000_000_000)
        return int(info.mtime) * 1_000_000_000
    return 0
