"""A directory tree written only through directory file descriptors: nothing escapes its root.

Every write the layer applier makes goes through :class:`RootDir`, and this is the whole argument that
it stays inside the root:

- the root is opened once (``O_DIRECTORY | O_NOFOLLOW``) and every other directory fd is reached from it
  one component at a time with ``openat(O_DIRECTORY | O_NOFOLLOW)``, so no fd ever names a directory
  outside the tree (``..`` is never handed to the kernel: it is applied to the logical path here, and
  refused at the root);
- a symlink met on the way to a parent is resolved *inside* the root, as the kernel would in a chroot
  (an absolute target starts again at the root; ``..`` above the root is refused with
  :class:`UnsafePath`), at most ``max_symlink_hops`` times;
- the final component is only ever created or changed with ``*at`` calls that do not follow symlinks
  (``O_CREAT | O_EXCL | O_NOFOLLOW``, ``mkdirat``, ``symlinkat``, ``linkat`` without
  ``AT_SYMLINK_FOLLOW``, ``fchownat``/``utimensat`` with ``AT_SYMLINK_NOFOLLOW``), or through an fd
  opened with ``O_NOFOLLOW``;
- the tree is private to one build (a fresh ``mkdtemp`` directory, mode 0700), so nothing else swaps a
  component between the check and the use.

Errors: :class:`~forkd_client.images.errors.UnsafePath` (climbing out, symlink loops),
:class:`~forkd_client.images.errors.LayerRejected` (a parent that is not a directory); OSError for host facts.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable

from .errors import LayerRejected, UnsafePath

Path_ = tuple[str, ...]
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CACHE_SIZE = 64


class RootDir:
    """The tree under construction, opened at ``path``."""

    def __init__(self, path: str | os.PathLike[str], *, max_symlink_hops: int = 40) -> None:
        self.fd = os.open(path, DIR_FLAGS)
        self.max_symlink_hops = max_symlink_hops
        self.layer: int | None = None  # named in errors (the applier sets it)
        self._cache: dict[Path_, tuple[int, Path_]] = {}
        self._retired: list[int] = []

    def close(self) -> None:
        self.forget()
        self._close_retired()
        os.close(self.fd)

    def forget(self) -> None:
        """Drop the cached parent fds (after anything was removed, a cached path may resolve elsewhere).

        The fds stay open until the next :meth:`resolve_dir`, so a caller still holding one from this
        entry's resolution can finish with it.
        """
        self._retired.extend(fd for fd, _ in self._cache.values())
        self._cache.clear()

    def _close_retired(self) -> None:
        for fd in self._retired:
            os.close(fd)
        self._retired.clear()

    def resolve_dir(
        self, parts: Path_, *, create: Callable[[int, Path_, str], None] | None = None, entry: str = ""
    ) -> tuple[int, Path_] | None:
        """An fd of the directory ``parts`` names, and its canonical (symlink-free) path.

        Missing components are created with ``create(parent_fd, parent_path, name)`` when given, else None is
        returned. The fd belongs to this object's cache: use it for the current entry, never close it. Raises UnsafePath when
        resolution climbs out of the root or loops, LayerRejected when a component is not a directory.
        """
        hit = self._cache.get(parts)
        if hit is not None:
            return hit
        self._close_retired()
        fds: list[int] = []
        canon: list[str] = []
        pending = list(reversed(parts))
        hops = 0
        try:
            while pending:
                name = pending.pop()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not canon:
                        raise UnsafePath(
                            "its path climbs out of the root through a symlink", layer=self.layer, entry=entry
                        )
                    canon.pop()
                    os.close(fds.pop())
                    continue
                cur = fds[-1] if fds else self.fd
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    if create is None:
                        return None
                    create(cur, tuple(canon), name)
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    hops += 1
                    if hops > self.max_symlink_hops:
                        raise UnsafePath(
                            f"more than {self.max_symlink_hops} symlinks on the way to its parent",
                            layer=self.layer,
                            entry=entry,
                        )
                    target = os.readlink(name, dir_fd=cur)
                    if target.startswith("/"):
                        while fds:
                            os.close(fds.pop())
                        canon.clear()
                    pending.extend(reversed(target.split("/")))
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    raise LayerRejected(
                        f"its parent /{'/'.join([*canon, name])} is not a directory", layer=self.layer, entry=entry
                    )
                fds.append(os.open(name, DIR_FLAGS, dir_fd=cur))
                canon.append(name)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        for fd in fds[:-1]:
            os.close(fd)
        result = (fds[-1] if fds else os.dup(self.fd), tuple(canon))
        if len(self._cache) >= _CACHE_SIZE:
            self.forget()
        self._cache[parts] = result
        return result

    def remove(self, dir_fd: int, name: str) -> None:
        """Remove ``name`` in ``dir_fd`` whatever it is (a directory with all it holds), without following links."""
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
        self.forget()

    def open_canonical(self, path: Path_) -> int | None:
        """An fd of the directory at canonical ``path`` (no symlink followed), None when it is gone.
        The caller closes it."""
        fd = os.dup(self.fd)
        for name in path:
            try:
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    return None
                raise
            os.close(fd)
            fd = nxt
        return fd


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in ``dir_fd``, None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
