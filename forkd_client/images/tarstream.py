"""Reading one layer blob as a stream of tar entries, within the build's limits.

- The compression is sniffed from the first bytes (gzip ``1f 8b``, zstd ``28 b5 2f fd``, else a plain
  tar), whatever the media type says: registries and ``docker save`` are not always truthful about it.
- :class:`DecompressedStream` counts every byte the decompressor *produces* against
  ``max_decompressed_bytes`` (the decompression-bomb bound) and hashes them, so the layer's diff_id
  (sha256 of the uncompressed tar) is known once the stream is drained.
- :func:`tar_entries` reads entries with Python's tarfile in stream mode, after refusing pax and GNU
  long-name records over ``max_header_bytes`` (tarfile reads them whole into memory) and counting
  entries against ``max_entries``. Malformed input becomes :class:`CorruptLayer`.

Errors: :class:`~forkd_client.images.errors.LimitExceeded`, :class:`~forkd_client.images.errors.CorruptLayer`.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

import zstandard

from .errors import CorruptLayer, LimitExceeded
from .limits import ImageLimits

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_READ = 1 << 20
BLOCKSIZE = tarfile.BLOCKSIZE
_nti = tarfile.nti  # type: ignore[attr-defined]  # tarfile's number parser (not in typeshed)
#: what the decompressors and tarfile raise for input that is not what it claims to be
DECODE_ERRORS = (tarfile.TarError, zlib.error, gzip.BadGzipFile, zstandard.ZstdError, EOFError, RecursionError)


@dataclass
class Budget:
    """What the layers of one build have used so far (shared by all its layers)."""

    limits: ImageLimits
    decompressed: int = 0
    unpacked: int = 0
    entries: int = 0


def compression_of(head: bytes) -> str:
    """``gzip``, ``zstd`` or ``none`` from a blob's first bytes."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


class DecompressedStream:
    """The uncompressed bytes of a layer blob, counted against the budget and hashed as produced."""

    def __init__(self, raw: IO[bytes], budget: Budget, layer: int) -> None:
        head = raw.read(4)
        raw.seek(0)
        self.compression = compression_of(head)
        self._raw = raw
        self._reader: Any
        if self.compression == "gzip":
            self._reader = gzip.GzipFile(fileobj=raw, mode="rb")
        elif self.compression == "zstd":
            self._reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, read_size=_READ)
        else:
            self._reader = raw
        self._budget = budget
        self._layer = layer
        self._sha = hashlib.sha256()
        self.produced = 0

    def read(self, size: int = _READ) -> bytes:
        size = _READ if size is None or size < 0 else min(size, _READ)
        data = self._reader.read(size)
        if data:
            self.produced += len(data)
            self._budget.decompressed += len(data)
            if self._budget.decompressed > self._budget.limits.max_decompressed_bytes:
                raise LimitExceeded(
                    f"the layers decompress to more than {self._budget.limits.max_decompressed_bytes} bytes",
                    limit="max_decompressed_bytes",
                    layer=self._layer,
                )
            self._sha.update(data)
        return data

    def drain(self) -> str:
        """Read to the end (still counted) and return ``sha256:<hex>`` of everything produced."""
        while self.read(_READ):
            pass
        return "sha256:" + self._sha.hexdigest()


def _guarded_tarinfo(limits: ImageLimits, layer: int) -> type[tarfile.TarInfo]:
    """A TarInfo class that refuses oversized pax / GNU long-name records before tarfile reads them."""
    big = (
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
    )

    max_map = max(limits.max_header_bytes // 24, 1)  # entries of a GNU sparse map (24 bytes each in GNU form)

    def too_many(name: str) -> LimitExceeded:
        return LimitExceeded(
            f"a sparse map of more than {max_map} entries", limit="max_header_bytes", layer=layer, entry=name
        )

    class GuardedTarInfo(tarfile.TarInfo):
        def _proc_member(self, tarfile: tarfile.TarFile) -> Any:  # noqa: N805 - tarfile's own hook
            if self.type in big and self.size > limits.max_header_bytes:
                raise LimitExceeded(
                    f"a tar extended header of {self.size} bytes",
                    limit="max_header_bytes",
                    layer=layer,
                    entry=self.name,
                )
            return super()._proc_member(tarfile)  # type: ignore[misc]  # tarfile's documented subclass hook

        # tarfile reads GNU sparse maps without a bound: these are its own two readers (Python 3.11), bounded
        def _proc_sparse(self, tarfile: tarfile.TarFile) -> Any:  # noqa: N805
            structs, isextended, origsize = self._sparse_structs  # type: ignore[attr-defined]
            del self._sparse_structs  # type: ignore[attr-defined]
            while isextended:
                if len(structs) > max_map:
                    raise too_many(self.name)
                buf = tarfile.fileobj.read(BLOCKSIZE)
                pos = 0
                for _ in range(21):
                    try:
                        offset, numbytes = _nti(buf[pos : pos + 12]), _nti(buf[pos + 12 : pos + 24])
                    except ValueError:
                        break
                    if offset and numbytes:
                        structs.append((offset, numbytes))
                    pos += 24
                isextended = bool(buf[504])
            self.sparse = structs
            self.offset_data = tarfile.fileobj.tell()
            tarfile.offset = self.offset_data + self._block(self.size)  # type: ignore[attr-defined]
            self.size = origsize
            return self

        def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: Any, tarfile: tarfile.TarFile) -> None:  # noqa: A002
            sparse: list[int] = []
            buf = tarfile.fileobj.read(BLOCKSIZE)
            fields_text, buf = buf.split(b"\n", 1)
            fields = int(fields_text)
            if fields > max_map:
                raise too_many(next.name)
            while len(sparse) < fields * 2:
                if b"\n" not in buf:
                    buf += tarfile.fileobj.read(BLOCKSIZE)
                number, buf = buf.split(b"\n", 1)
                sparse.append(int(number))
            next.offset_data = tarfile.fileobj.tell()
            next.sparse = list(zip(sparse[::2], sparse[1::2], strict=False))  # type: ignore[assignment]  # typeshed: bytes

    return GuardedTarInfo


def tar_entries(
    stream: DecompressedStream, budget: Budget, layer: int
) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """Yield ``(entry, tar)`` for each entry of the layer (read an entry's data with ``tar.extractfile``
    before asking for the next). Raises LimitExceeded or CorruptLayer."""
    try:
        tar = tarfile.open(  # noqa: SIM115 - closed by the `with tar:` below, after the open is checked
            fileobj=cast(IO[bytes], stream),  # tarfile only calls read() in stream mode
            mode="r|",
            tarinfo=_guarded_tarinfo(budget.limits, layer),
            encoding="utf-8",
            errors="surrogateescape",
        )
    except DECODE_ERRORS as e:
        raise CorruptLayer(f"not a tar archive ({e})", layer=layer) from None
    with tar:
        while True:
            try:
                info = tar.next()
            except DECODE_ERRORS as e:
                raise CorruptLayer(f"cannot read the next entry ({e})", layer=layer) from None
            if info is None:
                return
            # stream mode keeps every header in TarFile.members otherwise: memory would grow with entries
            tar.members.clear()  # type: ignore[attr-defined]  # an attribute typeshed does not declare
            budget.entries += 1
            if budget.entries > budget.limits.max_entries:
                raise LimitExceeded(
                    f"more than {budget.limits.max_entries} entries", limit="max_entries", layer=layer, entry=info.name
                )
            yield info, tar
