"""The smallest static x86-64 Linux executable around position-independent machine code.

The guest's tiny helpers (``forkd-reseed``, ``forkd-clock``) are hand-assembled, because the
guest may have no compiler, no libc the host could link against, and busybox cannot issue the
ioctls and syscalls they need. One ELF64 header, one ``PT_LOAD`` segment (R+X) holding the
headers and the code, no sections; the entry point is the first byte after the headers.
"""

from __future__ import annotations

import struct

_BASE = 0x400000
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")


def static_elf(code: bytes) -> bytes:
    """``code`` wrapped as a complete static ELF64 executable (ET_EXEC, EM_X86_64)."""
    header_size = _EHDR.size + _PHDR.size
    total = header_size + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, SysV ABI
    ehdr = _EHDR.pack(
        ident, 2, 0x3E, 1, _BASE + header_size, _EHDR.size, 0, 0, _EHDR.size, _PHDR.size, 1, 0, 0, 0
    )  # ET_EXEC, EM_X86_64
    phdr = _PHDR.pack(1, 5, 0, _BASE, _BASE, total, total, 0x1000)  # PT_LOAD, R+X
    return ehdr + phdr + code
