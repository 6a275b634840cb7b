"""Make an ext4 image's inode times a function of its files: atime and ctime set to mtime, in place.

``mkfs.ext4 -d`` (e2fsprogs 1.47.0) copies each file's atime and ctime from the host, and a file's ctime is
the moment it was extracted there: two builds of the same tree would differ in every inode. Only those
fields (and the inode checksums over them) differ; this pass rewrites them from each inode's own mtime,
so the same tree gives byte-identical images. e2fsprogs 1.47.1+ clamps these times to ``SOURCE_DATE_EPOCH``
instead; the rewrite is harmless there too.

The pass reads the superblock and group descriptors, walks the inode bitmap of every initialised group, and
for each in-use inode sets ``i_atime = i_ctime = i_mtime`` (and the nanosecond ``*_extra`` fields alike),
recomputing the inode checksum (crc32c, the ``metadata_csum`` feature) when the image has one. The builder
runs ``e2fsck -fn`` afterwards, which checks every checksum this pass wrote.

Errors: :class:`~forkd_client.images.errors.ToolFailed` for an image that is not ext4 as expected.
"""

from __future__ import annotations

import os
import struct

import google_crc32c

from .errors import ToolFailed

_MAGIC = 0xEF53
_RO_COMPAT_METADATA_CSUM = 0x400
_INCOMPAT_64BIT = 0x80
_INCOMPAT_CSUM_SEED = 0x2000
_BG_INODE_UNINIT = 0x1
# offsets inside an inode
_ATIME, _CTIME, _MTIME, _GENERATION, _CSUM_LO = 0x08, 0x0C, 0x10, 0x64, 0x7C
_EXTRA_ISIZE, _CSUM_HI, _CTIME_EXTRA, _MTIME_EXTRA, _ATIME_EXTRA = 0x80, 0x82, 0x84, 0x88, 0x8C


def crc32c_raw(seed: int, data: bytes) -> int:
    """ext4's ``crc32c_le(seed, data)``: the Castagnoli CRC register, without the final inversion."""
    return ~google_crc32c.extend(~seed & 0xFFFFFFFF, data) & 0xFFFFFFFF


def _u16(buf: bytes | bytearray, off: int) -> int:
    return int(struct.unpack_from("<H", buf, off)[0])


def _u32(buf: bytes | bytearray, off: int) -> int:
    return int(struct.unpack_from("<I", buf, off)[0])


def normalize_inode_times(image: str | os.PathLike[str]) -> int:
    """Rewrite atime/ctime := mtime in every in-use inode of the ext4 ``image``; returns inodes changed."""
    with open(image, "r+b") as f:
        fd = f.fileno()
        sb = os.pread(fd, 1024, 1024)
        if len(sb) < 1024 or _u16(sb, 0x38) != _MAGIC:
            raise ToolFailed("mkfs.ext4", f"{image} has no ext4 superblock")
        block = 1024 << _u32(sb, 0x18)
        first_data_block, blocks_per_group, inodes_per_group = _u32(sb, 0x14), _u32(sb, 0x20), _u32(sb, 0x28)
        inode_size = _u16(sb, 0x58) if _u32(sb, 0x4C) >= 1 else 128
        incompat, ro_compat = _u32(sb, 0x60), _u32(sb, 0x64)
        blocks = _u32(sb, 0x04) | ((_u32(sb, 0x150) << 32) if incompat & _INCOMPAT_64BIT else 0)
        desc_size = _u16(sb, 0xFE) if incompat & _INCOMPAT_64BIT else 32
        csum = bool(ro_compat & _RO_COMPAT_METADATA_CSUM)
        seed = _u32(sb, 0x270) if incompat & _INCOMPAT_CSUM_SEED else crc32c_raw(0xFFFFFFFF, sb[0x68:0x78])
        groups = -(-(blocks - first_data_block) // blocks_per_group)
        table = os.pread(fd, groups * desc_size, (first_data_block + 1) * block)
        changed = 0
        for group in range(groups):
            desc = table[group * desc_size : (group + 1) * desc_size]
            if _u16(desc, 0x12) & _BG_INODE_UNINIT:
                continue
            bitmap_block, itable_block, unused = _u32(desc, 0x04), _u32(desc, 0x08), _u16(desc, 0x1C)
            if desc_size >= 64:
                bitmap_block |= _u32(desc, 0x24) << 32
                itable_block |= _u32(desc, 0x28) << 32
                unused |= _u16(desc, 0x32) << 16
            used = inodes_per_group - unused
            if used <= 0:
                continue
            bitmap = os.pread(fd, (used + 7) // 8, bitmap_block * block)
            inodes = bytearray(os.pread(fd, used * inode_size, itable_block * block))
            dirty = False
            for index in range(used):
                if bitmap[index >> 3] & (1 << (index & 7)) and _fix(
                    inodes, index * inode_size, inode_size, group * inodes_per_group + index + 1, csum, seed
                ):
                    dirty = True
                    changed += 1
            if dirty:
                os.pwrite(fd, inodes, itable_block * block)
        os.fsync(fd)
    return changed


def _fix(inodes: bytearray, off: int, size: int, number: int, csum: bool, seed: int) -> bool:
    """Set one inode's atime/ctime from its mtime (and its checksum); False when nothing changed."""
    raw = inodes[off : off + size]
    new = bytearray(raw)
    mtime = raw[_MTIME : _MTIME + 4]
    new[_ATIME : _ATIME + 4] = mtime
    new[_CTIME : _CTIME + 4] = mtime
    extra = _u16(raw, _EXTRA_ISIZE) if size > 128 else 0
    if extra >= _MTIME_EXTRA + 4 - 128:
        mtime_extra = raw[_MTIME_EXTRA : _MTIME_EXTRA + 4]
        new[_CTIME_EXTRA : _CTIME_EXTRA + 4] = mtime_extra
        if extra >= _ATIME_EXTRA + 4 - 128:
            new[_ATIME_EXTRA : _ATIME_EXTRA + 4] = mtime_extra
    if new == raw:
        return False
    if csum:
        has_hi = extra >= _CSUM_HI + 2 - 128
        new[_CSUM_LO : _CSUM_LO + 2] = b"\0\0"
        if has_hi:
            new[_CSUM_HI : _CSUM_HI + 2] = b"\0\0"
        crc = crc32c_raw(seed, struct.pack("<I", number))
        crc = crc32c_raw(crc, bytes(new[_GENERATION : _GENERATION + 4]))
        crc = crc32c_raw(crc, bytes(new))
        new[_CSUM_LO : _CSUM_LO + 2] = struct.pack("<H", crc & 0xFFFF)
        if has_hi:
            new[_CSUM_HI : _CSUM_HI + 2] = struct.pack("<H", crc >> 16)
    inodes[off : off + size] = new
    return True
