"""``forkd-clock``: a 59-byte static x86-64 Linux program that sets the guest's wall clock.

Why it exists: a child restored from a snapshot wakes up with the wall clock of the moment the
snapshot was taken (``date`` in a child forked a day later printed the bake time). The host sends
its ``CLOCK_REALTIME`` right after the restore; busybox ``date -s`` only takes whole seconds, so
this program reads a ``struct timespec`` (two little-endian 64-bit integers: seconds,
nanoseconds; exactly 16 bytes) from stdin and calls ``clock_settime(CLOCK_REALTIME, …)``.
``CLOCK_MONOTONIC`` is not touched: it continues from the snapshot's value and never goes back.
Exit status: 0 ok, 1 not 16 bytes on stdin, 2 clock_settime failed.

The machine code below was assembled from this source (GNU as, intel syntax)::

    _start: sub rsp, 16
            xor eax, eax ; xor edi, edi ; mov rsi, rsp ; mov edx, 16 ; syscall   ; read(0, rsp, 16)
            mov edi, 1 ; cmp rax, 16 ; jne exit
            mov eax, 227 ; xor edi, edi ; mov rsi, rsp ; syscall                ; clock_settime(0, rsp)
            mov edi, 2 ; test rax, rax ; jnz exit
            xor edi, edi
    exit:   mov eax, 60 ; syscall
"""

from __future__ import annotations

import struct

from vmm.guest.elf import static_elf

_CODE = bytes.fromhex(
    "4883ec1031c031ff4889e6ba100000000f05bf010000004883f8107518b8e300000031ff4889e60f05"
    "bf020000004885c0750231ffb83c0000000f05"
)


def clock_elf() -> bytes:
    """The helper as a complete static ELF64 executable."""
    return static_elf(_CODE)


def timespec(ns: int) -> bytes:
    """``ns`` nanoseconds since the epoch as the 16 bytes ``forkd-clock`` reads."""
    return struct.pack("<qq", ns // 1_000_000_000, ns % 1_000_000_000)
