"""A read-only one-file FUSE filesystem exposing a :class:`~.image.LazyImage` as ``memory.bin``.

The binding is mfusepy (ctypes over libfuse; chosen by measurement, docs/decisions/0010-lazy-fork-fuse.md).
Opens for writing are accepted, because QEMU 7.2 opens its memory file O_RDWR even with
``share=off`` (reference: vmm-qemu.md); writes and truncation are refused (EROFS): a
``MAP_PRIVATE`` mapping never writes back. A read whose chunk could not be served answers EIO
(the chunk is recorded on the image). The kernel keeps what was read in the page cache
(``kernel_cache``), so every page crosses into this process at most once per mount.

:class:`LazyMount` mounts on a directory and serves from a thread until :meth:`LazyMount.unmount`;
``handles`` counts the file's open handles (a mapping keeps one until it is unmapped, so a server
can tell when nothing uses the file any more).

The mount can come up before the image exists: :class:`PendingImage` knows only the file's size
(from the head's config), and its reads wait until :meth:`PendingImage.set` gives it the
:class:`~.image.LazyImage` (then they are served) or :meth:`PendingImage.fail` says it will never
come (then they answer EIO). So a VMM can open and map the file while the chunk maps and the
vmstate are still being fetched.

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
    """What the mount serves: a :class:`~.image.LazyImage`, or a local file recording its reads
    (:class:`~.record.RecordingImage`)."""

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


def _operations(image: PendingImage, fuse: Any, handles: OpenCount) -> Any:
    """The filesystem's operations (a class built on first use, mfusepy being imported lazily)."""

    class LazyFile(fuse.Operations):
        use_ns = True

        def __init__(self) -> None:
            now = time.time_ns()
            self._times = {"st_atime": now, "st_mtime": now, "st_ctime": now}

        def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
            if path == "/":
                return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, **self._times}
            if path == "/" + FILE_NAME:
                return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": image.size, **self._times}
            raise fuse.FuseOSError(errno.ENOENT)

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", FILE_NAME]

        def open(self, path: str, flags: int) -> int:
            if path != "/" + FILE_NAME:
                raise fuse.FuseOSError(errno.ENOENT)
            if flags & os.O_TRUNC:
                raise fuse.FuseOSError(errno.EROFS)
            handles.add(1)
            return 0

        def release(self, path: str, fh: int) -> int:
            handles.add(-1)
            return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            try:
                return image.read(offset, size)
            except (HubError, ImageUnavailable):
                raise fuse.FuseOSError(errno.EIO) from None  # the failure is recorded on the image

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            raise fuse.FuseOSError(errno.EROFS)

        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            if length != image.size:
                raise fuse.FuseOSError(errno.EROFS)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            raise fuse.FuseOSError(errno.EROFS)

        def unlink(self, path: str) -> None:
            raise fuse.FuseOSError(errno.EROFS)

        def statfs(self, path: str) -> dict[str, int]:
            return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": image.size // 4096, "f_namemax": 255}

    return LazyFile()


class LazyMount:
    """``image`` served as ``<mountpoint>/memory.bin`` from a background thread; ``image`` may be a
    :class:`PendingImage` (reads wait until it is set), else (any :class:`ServedImage`) it is
    wrapped in one already set.

    Raises LazyUnsupported (no FUSE here), OSError (the mount did not appear in time).
    """

    def __init__(self, image: ServedImage | PendingImage, mountpoint: Path) -> None:
        fuse = fuse_module()
        if not isinstance(image, PendingImage):
            pending = PendingImage(image.size)
            pending.set(image)
            image = pending
        self.image = image
        self.mountpoint = Path(mountpoint)
        if os.path.ismount(self.mountpoint):  # left by a killed session ("transport endpoint is not connected")
            _fusermount_unmount(self.mountpoint)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.path = self.mountpoint / FILE_NAME
        self.error: BaseException | None = None
        self.handles = OpenCount()  # open handles of memory.bin, mappings included
        ops = _operations(image, fuse, self.handles)

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
                raise OSError(f"the lazy memory image did not mount on {self.mountpoint}: {self.error or 'timeout'}")
            time.sleep(0.01)
        # libfuse took over the signals that had their default action (SIGTERM, SIGHUP: "unmount and
        # go on"); give them back, so they end this process as they would without a mount
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)

    def unmount(self) -> None:
        """Unmount (lazily: children still mapping the file keep their pages) and stop serving. Idempotent."""
        if os.path.ismount(self.mountpoint):
            _fusermount_unmount(self.mountpoint)
        self._thread.join(timeout=10)


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
