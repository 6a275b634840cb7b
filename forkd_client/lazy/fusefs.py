"""A read-only FUSE filesystem exposing :class:`~.image.LazyImage` files by role: ``memory.bin``,
and ``rootfs.ext4`` when the head has a root filesystem.

The binding is mfusepy (ctypes over libfuse; chosen by measurement, docs/decisions/0010-lazy-fork-fuse.md).
Opens for writing are accepted, because QEMU 7.2 opens its memory file O_RDWR even with
``share=off`` (reference: vmm-qemu.md); writes and truncation are refused (EROFS): a
``MAP_PRIVATE`` mapping never writes back, and a child's disk is a ``snapshot=on`` overlay whose
backing file QEMU only reads. A read whose chunk could not be served answers EIO (the chunk is
recorded on the image). The kernel keeps what was read in the page cache
(``kernel_cache``), so every page crosses into this process at most once per mount.

:class:`LazyMount` mounts on a directory and serves from a thread until :meth:`LazyMount.unmount`;
``handles`` counts the files' open handles (a mapping keeps one until it is unmapped, a VMM's
disk one until it exits, so a server can tell when nothing uses them any more).

The mount can come up before the images exist: :class:`PendingImage` knows only the file's size
(from the head's config), and its reads wait until :meth:`PendingImage.set` gives it the
:class:`~.image.LazyImage` (then they are served) or :meth:`PendingImage.fail` says it will never
come (then they answer EIO). So a VMM can open and map the memory file and open its disk while
the chunk maps and the vmstate are still being fetched.

Errors: LazyUnsupported (no FUSE on this host: /dev/fuse, libfuse or fusermount missing), OSError.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from manifest import mediatypes as mt

from ..hub.errors import HubError
from .errors import ImageUnavailable, LazyUnsupported

FILE_NAME = mt.MEMORY_FILE
_FUSE_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # libfuse installs handlers where these have the default action
MOUNT_TIMEOUT_S = 10.0
MAX_IDLE_FUSE_THREADS = 10  # libfuse 3's own default: idle threads kept for reads (faults come a few at a time)
_SIG_IGN = 1  # <signal.h>: ((__sighandler_t) 1)


def fuse_module() -> Any:
    """mfusepy, imported on first use (it loads libfuse). Raises LazyUnsupported."""
    if not os.path.exists("/dev/fuse"):
        raise LazyUnsupported("a lazy fork needs FUSE, and this host has no /dev/fuse")
    try:
        import mfusepy  # type: ignore[import-untyped]
    except (ImportError, OSError) as e:
        raise LazyUnsupported(
            f"a lazy fork needs libfuse and the mfusepy package ({e}); install fuse3 (apt) and mfusepy (pip)"
        ) from None
    return mfusepy


class OpenCount:
    """How many open handles (an mmap holds one until it is unmapped) the file has."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


class ServedImage(Protocol):
    """What the mount serves as one file: a :class:`~.image.LazyImage`, or a local file recording
    its reads (:class:`~.record.RecordingImage`)."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, size: int) -> bytes: ...


class PendingImage:
    """A memory image of a known ``size`` whose :class:`ServedImage` arrives later; reads
    wait for it. Raises (from :meth:`read`) ImageUnavailable once :meth:`fail` was called, the
    image's own errors after :meth:`set`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ready = threading.Event()
        self._image: ServedImage | None = None
        self._why = ""

    def set(self, image: ServedImage) -> None:
        """Serve ``image`` from now on (and the reads waiting for it). ValueError: another size."""
        if image.size != self.size:
            raise ValueError(f"the image is {image.size:,} bytes, the mount was made for {self.size:,}")
        self._image = image
        self._ready.set()

    def fail(self, why: str) -> None:
        """Answer every read, waiting or later, with EIO (the image will never come). Idempotent;
        no effect once :meth:`set` was called."""
        if not self._ready.is_set():
            self._why = why or "the lazy session stopped"
            self._ready.set()

    def read(self, offset: int, size: int) -> bytes:
        self._ready.wait()
        if self._image is None:
            raise ImageUnavailable(self._why)
        return self._image.read(offset, size)


def _operations(files: Mapping[str, PendingImage], fuse: Any, handles: OpenCount) -> Any:
    """The filesystem's operations (a class built on first use, mfusepy being imported lazily)."""
    by_path = {"/" + name: image for name, image in files.items()}

    def served(path: str) -> PendingImage:
        image = by_path.get(path)
        if image is None:
            raise fuse.FuseOSError(errno.ENOENT)
        return image

    class LazyFile(fuse.Operations):
        use_ns = True

        def __init__(self) -> None:
            now = time.time_ns()
            self._times = {"st_atime": now, "st_mtime": now, "st_ctime": now}

        def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
            if path == "/":
                return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, **self._times}
            return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": served(path).size, **self._times}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *files]

        def open(self, path: str, flags: int) -> int:
            served(path)
            if flags & os.O_TRUNC:
                raise fuse.FuseOSError(errno.EROFS)
            handles.add(1)
            return 0

        def release(self, path: str, fh: int) -> int:
            handles.add(-1)
            return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            image = served(path)
            try:
                return image.read(offset, size)
            except (HubError, ImageUnavailable):
                raise fuse.FuseOSError(errno.EIO) from None  # the failure is recorded on the image

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            raise fuse.FuseOSError(errno.EROFS)

        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            if length != served(path).size:
                raise fuse.FuseOSError(errno.EROFS)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            raise fuse.FuseOSError(errno.EROFS)

        def unlink(self, path: str) -> None:
            raise fuse.FuseOSError(errno.EROFS)

        def statfs(self, path: str) -> dict[str, int]:
            blocks = sum(image.size for image in files.values()) // 4096
            return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": blocks, "f_namemax": 255}

    return LazyFile()


class LazyMount:
    """``images`` served from a background thread as ``<mountpoint>/<name>`` for each ``name:
    image`` (a single image: as ``memory.bin``); an image may be a :class:`PendingImage` (reads
    wait until it is set), else (any :class:`ServedImage`) it is wrapped in one already set.
    :attr:`path` is ``memory.bin``'s path (or the only file's), :meth:`path_of` any file's.

    Raises LazyUnsupported (no FUSE here), OSError (the mount did not appear in time),
    ValueError (no file, or a name that is not a plain file name).
    """

    def __init__(self, images: Mapping[str, ServedImage | PendingImage] | ServedImage, mountpoint: Path) -> None:
        named = dict(images) if isinstance(images, Mapping) else {FILE_NAME: images}
        if not named or any(not name or "/" in name or name in (".", "..") for name in named):
            raise ValueError(f"a lazy mount serves plain file names, got {sorted(named)}")
        fuse = fuse_module()
        self.files = {name: _pending(image) for name, image in named.items()}
        self.image = self.files.get(FILE_NAME) or next(iter(self.files.values()))
        self.mountpoint = Path(mountpoint)
        if os.path.ismount(self.mountpoint):  # left by a killed session ("transport endpoint is not connected")
            _fusermount_unmount(self.mountpoint)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.path = self.path_of(FILE_NAME if FILE_NAME in self.files else next(iter(self.files)))
        self.error: BaseException | None = None
        self.handles = OpenCount()  # open handles of the files, mappings and VMM disks included
        ops = _operations(self.files, fuse, self.handles)

        def serve() -> None:
            try:
                fuse.FUSE(
                    ops,
                    str(self.mountpoint),
                    foreground=True,
                    nothreads=False,
                    kernel_cache=True,
                    attr_timeout=3600,
                    entry_timeout=3600,
                    fsname="forkd-lazy",
                    **_loop_options(fuse),
                )
            except BaseException as e:  # noqa: BLE001 - reported by the mount wait / unmount
                self.error = e
            finally:
                _ignore_sigpipe_again()

        main = threading.current_thread() is threading.main_thread()
        before = {sig: signal.getsignal(sig) for sig in _FUSE_SIGNALS} if main else {}
        self._thread = threading.Thread(target=serve, name="forkd-lazy-fuse", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(self.mountpoint):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.unmount()
                raise OSError(f"the lazy images did not mount on {self.mountpoint}: {self.error or 'timeout'}")
            time.sleep(0.01)
        # libfuse took over the signals that had their default action (SIGTERM, SIGHUP: "unmount and
        # go on"); give them back, so they end this process as they would without a mount
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)

    def path_of(self, name: str) -> Path:
        """Where file ``name`` of this mount is. KeyError: the mount does not serve it."""
        if name not in self.files:
            raise KeyError(name)
        return self.mountpoint / name

    def unmount(self) -> None:
        """Unmount (lazily: children still mapping the file keep their pages) and stop serving. Idempotent."""
        if os.path.ismount(self.mountpoint):
            _fusermount_unmount(self.mountpoint)
        self._thread.join(timeout=10)


def _pending(image: ServedImage | PendingImage) -> PendingImage:
    """``image`` as a :class:`PendingImage` (one already set, unless it is one)."""
    if isinstance(image, PendingImage):
        return image
    pending = PendingImage(image.size)
    pending.set(image)
    return pending


def _loop_options(fuse: Any) -> dict[str, int]:
    """Options for libfuse's multi-threaded loop. libfuse 3 (what a fresh Debian host has: mfusepy
    loads libfuse 2 only where it is also installed) leaves ``max_idle_threads`` "unset" as
    UINT_MAX, and 3.14 then prints "Ignoring invalid max threads value 4294967295 > max
    (100000)." on every mount unless it is given; libfuse 2 refuses the option."""
    return {"max_idle_threads": MAX_IDLE_FUSE_THREADS} if getattr(fuse, "fuse_version_major", 2) >= 3 else {}


def _ignore_sigpipe_again() -> None:
    """Ignore SIGPIPE again, as Python does from its start, once libfuse's loop has ended.

    libfuse removes its signal handlers when its loop ends, and for SIGPIPE that means "set the
    default action if it is ignored": since Python ignores it, every process that ever served a
    mount would then be *killed* by the next write to a closed socket or pipe (a hub connection
    dropped during the install, the test run itself). Set at the C level (libc ``signal``),
    because this runs on the serving thread, where :func:`signal.signal` cannot; Python's own
    record of the handler already says SIG_IGN.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal(int(signal.SIGPIPE), _SIG_IGN)


def _fusermount_unmount(mountpoint: Path) -> None:
    """Unmount lazily (a mapping still in use keeps its pages); never raises."""
    tool = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount"
    subprocess.run([tool, "-u", "-z", str(mountpoint)], capture_output=True, check=False)
