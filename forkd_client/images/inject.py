"""The reserved directory ``/.forkd`` of a built rootfs: injected files and the image's run settings.

The builder writes, in this order, into a tree that must not have ``/.forkd`` yet (an image that already
has one is refused with :class:`ReservedPathInImage`):

- every file of the ``inject`` mapping (``relative/path`` → ``(content, mode)``; the guest agent, a static
  busybox and a helper in practice), owner 0:0, parent directories 0755;
- ``env``: one ``export NAME='value'`` line per config ``Env`` entry, the value POSIX single-quoted (``'``
  written as ``'\\''``), so ``. /.forkd/env`` in busybox sh reproduces every value byte for byte. Entries that
  no POSIX shell can export (no ``=``, a name that is not ``[A-Za-z_][A-Za-z0-9_]*``, a NUL, text that is not
  UTF-8) are left out
  with a note;
- ``workdir``: the config's WorkingDir (``/`` when unset) and a newline;
- ``image.json``: provenance and config as JSON (sorted keys).

Every file gets the same fixed mtime (the builder passes the newest mtime of the image's files), so the
directory does not make two builds differ. :func:`has_posix_shell` says whether ``/bin/sh`` (symlinks
resolved inside the root) is an executable regular file.

Errors: :class:`ReservedPathInImage`, :class:`InvalidSetting` (an inject path or mode that is not valid).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import InvalidSetting, ReservedPathInImage
from .rootdir import RootDir, lstat_at

RESERVED_DIR = ".forkd"
GENERATED = ("env", "workdir", "image.json")
Inject = Mapping[str, tuple[bytes, int]]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_inject(inject: Inject) -> None:
    """Refuse inject paths that are absolute, climb, are empty or clash with the generated files."""
    for path, (content, mode) in inject.items():
        parts = path.split("/")
        if (
            not path
            or path.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or "\x00" in path
            or any(len(p.encode()) > 255 for p in parts)
        ):
            raise InvalidSetting(f"inject path {path!r} must be relative, without '.', '..' or empty components")
        if path in GENERATED:
            raise InvalidSetting(f"inject path {path!r} is written by the builder itself")
        if not isinstance(content, bytes) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise InvalidSetting(f"inject {path!r}: want (bytes, mode between 0 and 0o7777)")


def inject_fingerprint(inject: Inject | None) -> str:
    """sha256 over the sorted paths, modes and contents: part of the rootfs cache key."""
    sha = hashlib.sha256()
    for path in sorted(inject or {}):
        content, mode = (inject or {})[path]
        sha.update(f"{path}\0{mode:o}\0{hashlib.sha256(content).hexdigest()}\n".encode())
    return sha.hexdigest()


def shell_quote(value: str) -> str:
    """``value`` in POSIX single quotes."""
    return "'" + value.replace("'", "'\\''") + "'"


def env_file(env: list[str], note: Callable[[str], None]) -> str:
    """The ``/.forkd/env`` text for a config's Env list."""
    lines = []
    for item in env:
        name, sep, value = item.partition("=")
        if not sep or not _NAME.fullmatch(name) or "\x00" in value or not _utf8(value):
            note(f"left out of /.forkd/env: {item[:80]!r} (not exportable by a POSIX shell)")
            continue
        lines.append(f"export {name}={shell_quote(value)}\n")
    return "".join(lines)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape
        return False
    return True


def check_reserved(tree: Path) -> None:
    """Raises ReservedPathInImage when the tree already has ``/.forkd``."""
    if os.path.lexists(tree / RESERVED_DIR):
        raise ReservedPathInImage(
            f"the image already has /{RESERVED_DIR}, the directory the builder reserves for the guest agent; "
            "rebuild the image without it"
        )


def write_forkd_dir(
    tree: Path,
    *,
    inject: Inject | None,
    env: list[str],
    workdir: str | None,
    image_json: dict[str, Any],
    mtime: int,
    note: Callable[[str], None],
) -> None:
    """Create ``/.forkd`` in ``tree`` with the injected and generated files (module docstring)."""
    check_reserved(tree)
    files: dict[str, tuple[bytes, int]] = dict(inject or {})
    check_inject(files)
    if not _utf8(workdir or "/"):
        raise InvalidSetting(f"the image's WorkingDir {workdir!r} is not valid UTF-8")
    files["env"] = (env_file(env, note).encode("utf-8"), 0o644)
    files["workdir"] = (((workdir or "/") + "\n").encode("utf-8"), 0o644)
    files["image.json"] = (json.dumps(image_json, sort_keys=True, indent=2).encode() + b"\n", 0o644)
    ns = mtime * 1_000_000_000
    root = RootDir(tree)
    made: list[tuple[str, ...]] = []

    def mkdir(parent_fd: int, parent: tuple[str, ...], name: str) -> None:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
        os.chown(name, 0, 0, dir_fd=parent_fd, follow_symlinks=False)
        os.chmod(name, 0o755, dir_fd=parent_fd)
        made.append((*parent, name))

    try:
        for path in sorted(files):
            content, mode = files[path]
            parts = (RESERVED_DIR, *path.split("/"))
            hit = root.resolve_dir(parts[:-1], create=mkdir)
            assert hit is not None
            fd = os.open(
                parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=hit[0]
            )
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchown(fd, 0, 0)
                os.fchmod(fd, mode)
                os.utime(fd, ns=(ns, ns))
            finally:
                os.close(fd)
        for directory in sorted(made, key=len, reverse=True):
            dfd = root.open_canonical(directory)
            if dfd is not None:
                os.utime(dfd, ns=(ns, ns))
                os.close(dfd)
    finally:
        root.close()


def has_posix_shell(tree: Path, max_hops: int = 40) -> bool:
    """Whether ``/bin/sh`` in ``tree``, symlinks resolved inside it, is an executable regular file."""
    root = RootDir(tree, max_symlink_hops=max_hops)
    try:
        parts: tuple[str, ...] = ("bin", "sh")
        for _ in range(max_hops):
            hit = root.resolve_dir(parts[:-1])
            if hit is None:
                return False
            st = lstat_at(hit[0], parts[-1])
            if st is None:
                return False
            if not stat.S_ISLNK(st.st_mode):
                return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)
            target = os.readlink(parts[-1], dir_fd=hit[0])
            parts = tuple(target.split("/")) if target.startswith("/") else (*hit[1], *target.split("/"))
        return False
    except (OSError, ValueError):
        return False
    finally:
        root.close()
