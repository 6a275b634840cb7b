"""Build a deterministic, sparse ext4 image from a directory tree, without mounting (``mkfs.ext4 -d``).

Size: :func:`scan_tree` counts the tree's blocks and inodes (hard links once) and :func:`minimum_bytes`
adds inode tables, the journal and metadata overhead. Without an explicit size the image gets
:data:`HEADROOM_FACTOR` × the minimum + :data:`HEADROOM_BYTES`, rounded up to 64 MiB, so ``--exec`` steps
have room to install packages (the file is sparse: free space costs no disk, and the hub never stores zero
chunks). An explicit size below the minimum is refused with :class:`RootfsTooSmall`.

Determinism (the same tree gives byte-identical images, so two environments built from one image share
their rootfs chunks on the hub):

- the UUID and the directory hash seed are derived from a caller-given seed (the build's cache key);
- every time mke2fs writes itself is ``E2FSPROGS_FAKE_TIME`` (the tree's newest mtime);
- mke2fs reads our own configuration (``MKE2FS_CONFIG``), not the host's ``/etc/mke2fs.conf``;
- e2fsprogs 1.47.0 populates directories in ``scandir``/``alphasort`` order; ``LC_ALL=C`` makes that byte
  order, whatever the host's locale;
- atime and ctime, which mke2fs copies from the host, are rewritten from each inode's mtime
  (:mod:`.ext4times`), then ``e2fsck -fn`` checks the result.

Errors: :class:`RootfsTooSmall`, :class:`ToolMissing`, :class:`ToolFailed`; OSError for host facts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import RootfsTooSmall, ToolFailed, ToolMissing
from .ext4times import normalize_inode_times
from .progress import Progress, no_progress

BLOCK = 4096
INODE_SIZE = 256
MiB = 1 << 20
HEADROOM_FACTOR = 1.25
HEADROOM_BYTES = 512 * MiB
ROUND = 64 * MiB
FEATURES = "has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize"
MKE2FS_CONF = f"""[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = {BLOCK}
	inode_size = {INODE_SIZE}
	inode_ratio = 16384

[fs_types]
	ext4 = {{
		features = {FEATURES}
	}}
"""
E2FSCK_CONF = "[options]\n\tbroken_system_clock = true\n"
_NO_SPACE = (
    "Could not allocate block",
    "No space left",
    "Could not allocate inode",
    "too many inodes",
    "Not enough space",
)


@dataclass(frozen=True)
class TreeStats:
    """What a tree needs: 4 KiB data blocks, inodes, and its newest mtime (seconds, clamped at 0)."""

    blocks: int
    inodes: int
    newest_mtime: int


@dataclass(frozen=True)
class Ext4Image:
    path: Path
    size: int
    minimum: int


def scan_tree(tree: Path) -> TreeStats:
    """Walk ``tree`` (never following symlinks) and count what its ext4 image must hold."""
    blocks = inodes = 0
    newest = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(tree)]
    while stack:
        directory = stack.pop()
        names = 0
        with os.scandir(directory) as it:
            for entry in it:
                names += len(entry.name) + 12
                st = entry.stat(follow_symlinks=False)
                newest = max(newest, int(st.st_mtime))
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                    continue
                if st.st_nlink > 1:
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                inodes += 1
                if stat.S_ISREG(st.st_mode):
                    blocks += -(-st.st_size // BLOCK) + (st.st_size > 48 * BLOCK)  # an extent block for big files
                elif stat.S_ISLNK(st.st_mode) and st.st_size > 59:
                    blocks += 1
        inodes += 1
        blocks += max(1, -(-names // BLOCK)) + 1  # entries, and an htree/xattr allowance
    return TreeStats(blocks, inodes, newest)


def _journal_blocks(blocks: int) -> int:
    """mke2fs's default journal size for a filesystem of ``blocks`` 4 KiB blocks."""
    for limit, journal in (
        (32768, 1024),
        (256 << 10, 4096),
        (512 << 10, 8192),
        (4096 << 10, 16384),
        (8192 << 10, 32768),
        (16384 << 10, 65536),
        (32768 << 10, 131072),
    ):
        if blocks < limit:
            return journal
    return 262144


def inode_count(stats: TreeStats, size: int) -> int:
    """Inodes to ask mke2fs for: twice the tree's (room for what --exec installs), at least one per 16 KiB."""
    return max(2 * stats.inodes + 4096, size // 16384)


def minimum_bytes(stats: TreeStats) -> int:
    """The smallest image (bytes, a multiple of 1 MiB) that holds the tree with its journal and metadata."""
    data = stats.blocks * BLOCK
    estimate = data
    for _ in range(3):  # the journal and inode tables depend on the size they are part of
        overhead = inode_count(stats, estimate) * INODE_SIZE + _journal_blocks(estimate // BLOCK) * BLOCK
        estimate = int((data + overhead) * 1.06) + 16 * MiB
    return -(-estimate // MiB) * MiB


def default_bytes(minimum: int) -> int:
    return -(-int(minimum * HEADROOM_FACTOR + HEADROOM_BYTES) // ROUND) * ROUND


def _derived_uuid(seed: bytes, purpose: str) -> str:
    return str(uuid.UUID(bytes=hashlib.sha256(seed + purpose.encode()).digest()[:16], version=4))


def _tool(name: str) -> str:
    path = shutil.which(name) or next(
        (p for p in (f"/sbin/{name}", f"/usr/sbin/{name}") if os.access(p, os.X_OK)), None
    )
    if path is None:
        raise ToolMissing(f"{name} is not installed (Debian package e2fsprogs)")
    return path


def build_ext4(
    tree: Path,
    image: Path,
    *,
    seed: bytes,
    size_bytes: int | None = None,
    stats: TreeStats | None = None,
    workdir: Path,
    progress: Progress = no_progress,
) -> Ext4Image:
    """Write the new sparse file ``image`` (must not exist) holding ``tree``. On error it is removed."""
    stats = stats or scan_tree(tree)
    minimum = minimum_bytes(stats)
    if size_bytes is not None and size_bytes < minimum:
        raise RootfsTooSmall(
            f"a rootfs of {size_bytes // MiB} MiB cannot hold this image's files: it needs at least {minimum // MiB} MiB",
            needed_mib=minimum // MiB,
            given_mib=size_bytes // MiB,
        )
    size = size_bytes if size_bytes is not None else default_bytes(minimum)
    conf = workdir / "mke2fs.conf"
    conf.write_text(MKE2FS_CONF)
    fsck_conf = workdir / "e2fsck.conf"
    fsck_conf.write_text(E2FSCK_CONF)
    env = {
        **os.environ,
        "LC_ALL": "C",
        "MKE2FS_CONFIG": str(conf),
        "E2FSCK_CONFIG": str(fsck_conf),
        "E2FSPROGS_FAKE_TIME": str(max(stats.newest_mtime, 1)),
    }
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    os.close(fd)
    try:
        os.truncate(image, size)
        command = [
            _tool("mkfs.ext4"), "-q", "-F", "-t", "ext4", "-b", str(BLOCK), "-I", str(INODE_SIZE),
            "-N", str(inode_count(stats, size)), "-m", "0", "-L", "rootfs",
            "-U", _derived_uuid(seed, "uuid"),
            "-E", f"hash_seed={_derived_uuid(seed, 'hash_seed')},nodiscard,lazy_itable_init=1",
            "-d", str(tree), str(image),
        ]  # fmt: skip
        _run_mkfs(command, env, image, stats.blocks * BLOCK, progress)
        normalize_inode_times(image)
        check = subprocess.run(
            [_tool("e2fsck"), "-f", "-n", str(image)], env=env, capture_output=True, text=True, timeout=3600
        )
        if check.returncode != 0:
            raise ToolFailed("e2fsck", f"the built image does not check clean: {_tail(check.stdout + check.stderr)}")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(image)
        raise
    return Ext4Image(image, size, minimum)


def _run_mkfs(command: list[str], env: dict[str, str], image: Path, total: int, progress: Progress) -> None:
    with open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            command, env=env, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    try:
        while True:
            try:
                output, _ = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                progress("mkfs", min(os.stat(image).st_blocks * 512, total), total)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        if any(marker in output for marker in _NO_SPACE):
            raise RootfsTooSmall(
                f"mkfs.ext4 ran out of space: the rootfs is too small for this image ({_tail(output)})",
                needed_mib=0,
                given_mib=os.stat(image).st_size // MiB,
            )
        raise ToolFailed("mkfs.ext4", f"exit {proc.returncode}: {_tail(output)}")
    progress("mkfs", total, total)


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())
