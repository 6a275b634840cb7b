"""``forkd-reseed``: a 292-byte static x86-64 Linux program that reseeds the guest kernel CRNG.

Why it exists: busybox cannot issue ioctls, and writing to ``/dev/urandom`` only *mixes* bytes
into the input pool; on Linux 6.1 the CRNG keeps producing from its old key until the next
scheduled reseed (up to 60 s later). Forked children therefore return identical
``/dev/urandom`` bytes right after a fork (measured: see ``vmm/qemu/driver.py``). The program
reads up to 256 bytes of host entropy from stdin and issues ``RNDADDENTROPY`` (mixing and
crediting them) and then ``RNDRESEEDCRNG`` (rekeying the CRNG at once), which is what
Firecracker's "random for clones" guidance prescribes. Exit status: 0 ok, 1 no input,
2 open failed, 3 RNDADDENTROPY failed, 4 RNDRESEEDCRNG failed.

The machine code below was assembled from this source (GNU as, intel syntax); it is
position-independent, so the ELF wrapper can place it anywhere::

    _start:   sub rsp, 272                ; struct rand_pool_info {int count; int size; u8 buf[256]}
              xor r12d, r12d              ; bytes read so far
    read:     mov edx, 256 ; sub edx, r12d ; jz done
              xor eax, eax ; xor edi, edi ; lea rsi, [rsp+r12+8] ; syscall   ; read(0, ...)
              test rax, rax ; jle done ; add r12, rax ; jmp read
    done:     mov edi, 1 ; test r12d, r12d ; jz exit
              mov [rsp+4], r12d ; shl r12d, 3 ; mov [rsp], r12d              ; size, bits
              mov eax, 2 ; lea rdi, [rip+path] ; mov esi, 1 ; syscall        ; open(path, O_WRONLY)
              mov edi, 2 ; test eax, eax ; js exit ; mov r13d, eax
              mov eax, 16 ; mov edi, r13d ; mov esi, 0x40085203 ; mov rdx, rsp ; syscall
              mov edi, 3 ; test rax, rax ; jnz exit                          ; RNDADDENTROPY
              mov eax, 16 ; mov edi, r13d ; mov esi, 0x5207 ; xor edx, edx ; syscall
              mov edi, 4 ; test rax, rax ; jnz exit                          ; RNDRESEEDCRNG
              xor edi, edi
    exit:     mov eax, 60 ; syscall
    path:     .asciz "/dev/urandom"
"""

from __future__ import annotations

from vmm.guest.elf import static_elf

_CODE = bytes.fromhex(
    "4881ec100100004531e4ba000100004429e2741531c031ff4a8d7424080f054885c07e054901c4ebe1"
    "bf010000004585e47465448964240441c1e40344892424b802000000488d3d53000000be010000000f05"
    "bf0200000085c0783c4189c5b8100000004489efbe035208404889e20f05bf030000004885c0751db810"
    "0000004489efbe0752000031d20f05bf040000004885c0750231ffb83c0000000f05"
    "2f6465762f7572616e646f6d00"
)


def reseed_elf() -> bytes:
    """The helper as a complete static ELF64 executable (one PT_LOAD segment, no sections)."""
    return static_elf(_CODE)
