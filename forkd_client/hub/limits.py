"""What a hub's declarations may make this client allocate or write (issue 27, client side).

A layer's config declares each chunked file's size and chunk size before any chunk map or chunk is
fetched; a pull holds 32 bytes a chunk of each file's chunk list (format v2) and sizes the staged
file from the declaration. A broken or hostile hub could declare a 1 TiB file of 4 KiB chunks (an
8 GiB chunk list), so every declaration is checked here, before anything is fetched or allocated
for it, against the client's own limits. The defaults match the hub's (docs/limits.md):

- ``FORKD_MAX_FILE_BYTES`` (default ``64GiB``): a chunked file's declared size;
- ``FORKD_MAX_FILE_CHUNKS`` (default ``1048576``): its declared chunk count (size / chunk size),
  so a chunk list holds at most 32 MiB.

A chunk map's body (bounded by ``MAX_CHUNK_MAP_BYTES``) is checked to list no more entries than its
file has chunks before it is parsed (:func:`check_map_entries`).

Errors: :class:`DeclarationTooLarge` (a HubError) naming the layer, the field, the declared value,
the limit and the variable that raises it; UsageError for a malformed variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from clikit.units import parse_size
from manifest import mediatypes as mt
from manifest.model import LayerConfig

from ..errors import UsageError
from .errors import HubError

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_FILE_CHUNKS",
    "FILE_BYTES_ENV",
    "FILE_CHUNKS_ENV",
    "ClientLimits",
    "DeclarationTooLarge",
    "check_files",
    "check_map_entries",
]

DEFAULT_MAX_FILE_BYTES = 64 << 30
DEFAULT_MAX_FILE_CHUNKS = 1 << 20
FILE_BYTES_ENV = "FORKD_MAX_FILE_BYTES"
FILE_CHUNKS_ENV = "FORKD_MAX_FILE_CHUNKS"


class DeclarationTooLarge(HubError):
    """A hub declared more than this client accepts (``detail``: field, declared, limit, setting)."""

    def __init__(self, layer: str, field: str, declared: int, limit: int, setting: str) -> None:
        super().__init__(
            f"layer {layer}: {field} declares {declared:,}, over this client's limit of {limit:,} "
            f"(set {setting} to accept more)",
            code="TOO_LARGE",
            detail={"layer": layer, "field": field, "declared": declared, "limit": limit, "setting": setting},
        )
        self.field, self.declared, self.limit, self.setting = field, declared, limit, setting


@dataclass(frozen=True)
class ClientLimits:
    file_bytes: int = DEFAULT_MAX_FILE_BYTES
    file_chunks: int = DEFAULT_MAX_FILE_CHUNKS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientLimits:
        """The defaults, changed by ``FORKD_MAX_FILE_BYTES`` (``64GiB``, ``1TiB``) and
        ``FORKD_MAX_FILE_CHUNKS`` (an integer). Raises UsageError naming a malformed value."""
        env = os.environ if env is None else env
        file_bytes, file_chunks = DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILE_CHUNKS
        raw = env.get(FILE_BYTES_ENV, "").strip()
        if raw:
            try:
                file_bytes = parse_size(raw)
            except ValueError as e:
                raise UsageError(f"{FILE_BYTES_ENV}: {e}") from None
        raw = env.get(FILE_CHUNKS_ENV, "").strip()
        if raw:
            if not raw.isdigit():
                raise UsageError(f"{FILE_CHUNKS_ENV}: not a count: {raw!r} (use e.g. 1048576)")
            file_chunks = int(raw)
        return cls(file_bytes, file_chunks)


def check_files(layer: str, config: LayerConfig, limits: ClientLimits | None = None) -> None:
    """Refuse a layer whose config declares a chunked file over the limits, before anything is
    fetched or allocated for it. Raises DeclarationTooLarge."""
    limits = limits or ClientLimits.from_env()
    for role in mt.CHUNKED_FILES:
        info = config.files.get(role)
        if info is None:
            continue
        if info.size > limits.file_bytes:
            raise DeclarationTooLarge(layer, f"{role} size", info.size, limits.file_bytes, FILE_BYTES_ENV)
        if info.chunk_size:
            chunks = -(-info.size // info.chunk_size)
            if chunks > limits.file_chunks:
                raise DeclarationTooLarge(
                    layer, f"{role} chunks ({info.size:,} bytes / chunkSize {info.chunk_size:,})", chunks,
                    limits.file_chunks, FILE_CHUNKS_ENV,
                )  # fmt: skip


def check_map_entries(layer: str, role: str, body: bytes, chunks: int) -> None:
    """Before a chunk map's body is parsed: it may list at most one entry per chunk of its file
    (each entry is a JSON array; the map's own ``blobs`` and ``chunks`` are two more), so parsing
    it allocates in proportion to the file's checked chunk count, not to whatever the body holds.
    Raises HubError."""
    arrays = body.count(b"[")
    if arrays > chunks + 2:
        raise HubError(
            f"layer {layer}: the chunk map of {role} holds up to {arrays - 2:,} entries, more than the "
            f"file's {chunks:,} chunks"
        )
