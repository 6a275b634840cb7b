"""A SHA-256 whose state can be saved to the database and resumed on another replica.

An upload session's PATCH requests may land on different hub replicas; each verifies the
frames it receives and carries the running sha256 of the data blob forward
(registry/push/upload_verify.py). :mod:`hashlib` cannot export a hash's state, so this calls
OpenSSL's ``SHA256_Init``/``SHA256_Update``/``SHA256_Final`` (libcrypto, the library hashlib
itself links) through :mod:`ctypes` on a ``SHA256_CTX`` it owns: that struct is public and
fixed (``sha.h``: eight 32-bit chaining words, the 64-bit length in two words, a 64-byte
block buffer, its fill and the digest length: 112 bytes), so its bytes are the state. ctypes
releases the GIL during each call, like hashlib, so hashing runs well in worker threads.

Where libcrypto or these symbols are missing, :data:`AVAILABLE` is False and callers fall
back to verifying a session at its finish (no state to carry).

Errors: ValueError for a saved state of the wrong size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib

__all__ = ["AVAILABLE", "STATE_BYTES", "ResumableSha256"]

#: sizeof(SHA256_CTX): h[8], Nl, Nh, data[16] (32-bit words), num, md_len (unsigned int).
STATE_BYTES = 112


def _load() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("crypto")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        for symbol in ("SHA256_Init", "SHA256_Update", "SHA256_Final"):
            getattr(lib, symbol)
    except (OSError, AttributeError):
        return None
    lib.SHA256_Init.argtypes = [ctypes.c_void_p]
    lib.SHA256_Update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    lib.SHA256_Final.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib


_LIB = _load()


def _self_test() -> bool:
    """The struct layout and the library agree with hashlib (else the state would be garbage)."""
    if _LIB is None:
        return False
    h = ResumableSha256()
    h.update(b"forkd" * 100)
    resumed = ResumableSha256(h.state())
    resumed.update(b"hub")
    return resumed.hexdigest() == hashlib.sha256(b"forkd" * 100 + b"hub").hexdigest()


class ResumableSha256:
    """``update``/``hexdigest`` like hashlib's, plus ``state()`` and a constructor that resumes one.

    Also counts ``size`` (bytes hashed) so it can stand in for :class:`manifest.digest.Hasher`.
    Raises: RuntimeError when libcrypto is unavailable (check :data:`AVAILABLE`), ValueError for a
    state that is not :data:`STATE_BYTES` long.
    """

    def __init__(self, state: bytes | None = None, size: int = 0) -> None:
        if _LIB is None:
            raise RuntimeError("libcrypto's SHA256_* functions are not available")
        self._ctx = ctypes.create_string_buffer(STATE_BYTES)
        if state is None:
            _LIB.SHA256_Init(self._ctx)
        elif len(state) != STATE_BYTES:
            raise ValueError(f"a saved sha256 state is {STATE_BYTES} bytes, not {len(state)}")
        else:
            ctypes.memmove(self._ctx, state, STATE_BYTES)
        self.size = size

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        if not view.nbytes:
            return
        if view.readonly:
            _LIB.SHA256_Update(self._ctx, bytes(view) if not isinstance(data, bytes) else data, view.nbytes)  # type: ignore[union-attr]
        else:
            buffer = (ctypes.c_char * view.nbytes).from_buffer(view)
            _LIB.SHA256_Update(self._ctx, buffer, view.nbytes)  # type: ignore[union-attr]
        self.size += view.nbytes

    def state(self) -> bytes:
        """The bytes to save; ``ResumableSha256(state, size)`` continues from here."""
        return self._ctx.raw

    def hexdigest(self) -> str:
        copy = ctypes.create_string_buffer(self._ctx.raw, STATE_BYTES)
        out = ctypes.create_string_buffer(32)
        _LIB.SHA256_Final(out, copy)  # type: ignore[union-attr]
        return out.raw.hex()

    def digest(self) -> str:
        """``sha256:<hex>``, as :class:`manifest.digest.Digest` prints."""
        return "sha256:" + self.hexdigest()


AVAILABLE = _self_test()
