"""Building a forkd pack from stored layers: the blocking half, run in a worker thread.

:func:`build_pack` turns a chain (root → head) of stored layers into forkd snapshot
directories under a work directory — ``vmstate`` decompressed and checked against the config,
``memory.bin`` (and ``rootfs.ext4``) assembled from the chunk maps on top of the previous
link's file with :func:`manifest.assemble.assemble_file`, ``snapshot.json`` synthesised as forkd
writes it — then writes them as one pack with :func:`manifest.forkd_pack.write_pack` (v1 for a
lone base, v2 for a chain) and hashes it.

Everything that decides the pack's bytes comes from the stored documents (tags, times,
annotations), never from the clock or the request, so building the same chain twice gives
the same bytes. Frames are read through a :data:`~manifest.assemble.FrameSource`;
:class:`StoreFrames` is the one that reads the hub's async blob store from the worker thread.

Errors: :class:`manifest.errors.ManifestError` and its subclasses (a frame, file or
vmstate that does not match its digest: ``DigestMismatch``/``AssemblyError``; a pack that
cannot be written: ``PackError``), ``hub_server.storage`` errors from the frame source, OSError.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio.from_thread
import zstandard

from hub_server.registry.content.recipes import blob_layout, read_blob_range
from hub_server.registry.core.context import RegistryContext
from manifest import mediatypes as mt
from manifest.assemble import FrameSource, assemble_file
from manifest.digest import Hasher
from manifest.errors import AssemblyError, DigestMismatch
from manifest.forkd_fields import FORKD_DERIVED
from manifest.forkd_pack import PackLink, write_pack
from manifest.model import ChunkMap, LayerConfig

__all__ = ["BuiltPack", "LinkSource", "StoreFrames", "build_pack", "declared_rootfs", "snapshot_json"]

#: Where synthesised snapshot.json files say the files are. forkd's unpack (and ours) rewrites
#: ``vmstate``/``memory`` to the directory it extracts into, so this only has to be absolute.
PLACEHOLDER_ROOT = "/forkd-hub/snapshots"
#: Bytes read from a data blob per trip to the event loop (frames of one map are mostly adjacent).
FRAME_WINDOW = 4 << 20
#: Windows kept, one per data blob (a layer also reads frames it reuses from older blobs).
FRAME_WINDOWS = 8
_HASH_BLOCK = 4 << 20


@dataclass(frozen=True)
class LinkSource:
    """One stored layer to unpack into a forkd snapshot directory named ``name``."""

    name: str  # forkd-safe link tag ([A-Za-z0-9_][A-Za-z0-9_-]{0,63})
    parent_name: str | None
    config: LayerConfig
    vmstate_blob: str  # digest of the stored vmstate blob (one zstd frame)
    vmstate_blob_size: int
    chunk_maps: dict[str, ChunkMap]  # file role → map (memory.bin, maybe rootfs.ext4)


class LinkDigestMismatch(DigestMismatch):
    """A link's assembled file does not hash to the ``sha256`` its config declares: ``index`` names the link
    (root 0), so the caller can remember the layer as unusable in every chain (issue 27, item 5)."""

    def __init__(self, index: int, what: str, expected: str, actual: str) -> None:
        super().__init__(what, expected, actual)
        self.index = index


@dataclass(frozen=True)
class BuiltPack:
    path: Path
    sha256: str  # lowercase hex of the pack file
    size: int


class StoreFrames:
    """A FrameSource for worker threads: reads data-blob ranges (whole objects or recipes) through the event loop.

    Must be called from a thread started by ``anyio.to_thread.run_sync``. Each call that
    misses reads a window of up to :data:`FRAME_WINDOW` bytes from ``offset`` and keeps it,
    so consecutive frames cost one trip to the loop. Raises the store's errors (BlobNotFound,
    InvalidRange for a range past the blob's end, StorageError).
    """

    def __init__(self, ctx: RegistryContext, *, window: int = FRAME_WINDOW, keep: int = FRAME_WINDOWS) -> None:
        self._ctx = ctx
        self._window = window
        self._keep = keep
        self._layouts: dict[str, tuple[int, bool]] = {}
        self._windows: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        self.reads = 0  # trips to the store, for tests and curiosity

    def __call__(self, blob: str, offset: int, length: int) -> bytes:
        cached = self._windows.get(blob)
        if cached is not None:
            start, data = cached
            if start <= offset and offset + length <= start + len(data):
                self._windows.move_to_end(blob)
                return data[offset - start : offset - start + length]
        layout = self._layouts.get(blob)
        if layout is None:
            layout = self._layouts[blob] = anyio.from_thread.run(blob_layout, self._ctx, blob)
        size, recipe = layout
        # Never past the blob's end, unless the frame itself is: then let the store say so.
        end = max(min(size, offset + max(length, self._window)), offset + length)
        data = anyio.from_thread.run(
            partial(read_blob_range, self._ctx, blob, offset, end - offset, recipe=recipe, size=size)
        )
        self.reads += 1
        self._windows[blob] = (offset, data)
        self._windows.move_to_end(blob)
        while len(self._windows) > self._keep:
            self._windows.popitem(last=False)
        return data[:length]


def snapshot_json(
    name: str, parent_name: str | None, parent_hash: str | None, carried: dict[str, Any] | None = None
) -> bytes:
    """forkd's ``snapshot.json`` for link ``name``: serde's field order and pretty layout.

    ``carried`` is the layer config's ``forkd`` object (``volumes``, a ``rootfs`` outside the
    snapshot directory, unknown fields), kept verbatim. A layer's own ``rootfs.ext4`` is in
    the pack, but no ``rootfs`` names it: a path into the snapshot directory would dangle
    wherever forkd unpacks it (forkd's unpack does not rewrite ``rootfs``).
    """
    directory = f"{PLACEHOLDER_ROOT}/{name}"
    extra = {k: v for k, v in (carried or {}).items() if k not in FORKD_DERIVED}
    doc: dict[str, object] = {
        "vmstate": f"{directory}/{mt.VMSTATE_FILE}",
        "memory": f"{directory}/{mt.MEMORY_FILE}",
        "volumes": extra.pop("volumes", []),
    }
    if parent_name is not None:
        doc["parent_tag"] = parent_name
        doc["parent_content_hash"] = parent_hash
    doc.update(extra)
    return json.dumps(doc, indent=2, ensure_ascii=False).encode()


def declared_rootfs(config: LayerConfig) -> dict[str, object] | None:
    """forkd's manifest.toml ``[rootfs]`` table for a layer whose rootfs is an image outside the snapshot
    directory (the config's ``forkd.rootfs``, whose sha256 and size its pusher stated in the annotations):
    forkd's pull then checks the image at ``target_path`` and, without it, warns that the sidecar is missing
    (the hub serves none: a push never uploads that image). None when the config says less, or when the layer
    has its own ``rootfs.ext4`` (that one is in the pack)."""
    target = (config.forkd or {}).get("rootfs")
    sha = config.annotations.get(mt.ANNOTATION_ROOTFS_SHA256, "")
    size = config.annotations.get(mt.ANNOTATION_ROOTFS_SIZE, "")
    hexpart = sha.removeprefix("sha256:")
    if (
        mt.ROOTFS_FILE in config.files
        or not isinstance(target, str)
        or not target.startswith("/")
        or not sha.startswith("sha256:")
        or len(hexpart) != 64
        or not all(c in "0123456789abcdef" for c in hexpart)
        or not size.isdecimal()
    ):
        return None
    return {"target_path": target, "sha256": hexpart, "size": int(size)}


def build_pack(
    links: Sequence[LinkSource],
    work: Path,
    frames: FrameSource,
    *,
    created_at: str,
    description: str | None,
    base_image: str | None,
) -> BuiltPack:
    """Assemble ``links`` (root → head) under ``work`` and write them as ``work/pack.forkd-snapshot.tar.zst``,
    the head's outside rootfs declared as forkd does (:func:`declared_rootfs`).

    ``work`` must exist and be empty; the caller removes it. Raises DigestMismatch,
    AssemblyError, PackError, the frame source's errors, OSError.
    """
    pack_links: list[PackLink] = []
    previous: dict[str, tuple[Path, str]] = {}
    memory_sha: str | None = None  # the previous link's memory.bin, lowercase hex
    for i, link in enumerate(links):
        directory = work / f"{i:02d}-{link.name}"
        directory.mkdir()
        _write_vmstate(link, directory / mt.VMSTATE_FILE, frames)
        assembled: dict[str, tuple[Path, str]] = {}
        for role, chunk_map in sorted(link.chunk_maps.items()):
            parent = None
            if chunk_map.parent_digest is not None:
                if role not in previous:
                    raise AssemblyError(f"link {link.name}: {role} applies to a parent {role} the chain lacks")
                parent = previous[role][0]
            result = assemble_file(
                chunk_map, directory / role, parent=parent, frames=frames, extra_algorithms=("sha256",)
            )
            sha = result.digests["sha256"]
            want = link.config.files[role].sha256 if role in link.config.files else None
            if want is not None and sha != want:
                raise LinkDigestMismatch(i, f"link {link.name}: assembled {role}", want, sha)
            assembled[role] = (result.path, sha.removeprefix("sha256:"))
        if mt.MEMORY_FILE not in assembled:
            raise AssemblyError(f"link {link.name}: no chunk map for {mt.MEMORY_FILE}")
        # The root of a pack is always a base (chains resolve down to one), so only later
        # links name a parent: the previous link, by the sha256 of its memory.bin.
        parent_hash = memory_sha if i > 0 else None
        (directory / "snapshot.json").write_bytes(
            snapshot_json(link.name, link.parent_name, parent_hash, link.config.forkd)
        )
        pack_links.append(PackLink(link.name, directory, link.parent_name, parent_hash))
        previous = assembled
        memory_sha = assembled[mt.MEMORY_FILE][1]
    out = work / "pack.forkd-snapshot.tar.zst"
    rootfs = declared_rootfs(links[-1].config) if links else None
    write_pack(pack_links, out, description=description, base_image=base_image, created_at=created_at, rootfs=rootfs)
    return BuiltPack(out, _sha256_file(out), out.stat().st_size)


class _BlobReader:
    """A read-only file over ``size`` bytes of a blob, through a FrameSource (for zstd's stream_reader)."""

    def __init__(self, frames: FrameSource, blob: str, size: int) -> None:
        self._frames, self._blob, self._size, self._position = frames, blob, size, 0

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._position if n < 0 else min(n, self._size - self._position)
        if n <= 0:
            return b""
        data = self._frames(self._blob, self._position, n)
        self._position += len(data)
        return data


def _write_vmstate(link: LinkSource, path: Path, frames: FrameSource) -> None:
    """Decompress the vmstate blob to ``path`` in bounded pieces and check its size and digest."""
    info = link.config.files[mt.VMSTATE_FILE]
    hasher = Hasher(info.digest.partition(":")[0])
    source = _BlobReader(frames, link.vmstate_blob, link.vmstate_blob_size)
    try:
        with zstandard.ZstdDecompressor().stream_reader(source) as reader, open(path, "wb") as out:  # type: ignore[arg-type]  # duck-typed read()
            while piece := reader.read(_HASH_BLOCK):
                if hasher.size + len(piece) > info.size:
                    raise AssemblyError(f"link {link.name}: the stored vmstate holds more than {info.size} bytes")
                hasher.update(piece)
                out.write(piece)
    except zstandard.ZstdError as e:
        raise AssemblyError(f"link {link.name}: the stored vmstate is not a valid zstd frame: {e}") from None
    got = str(hasher.digest())
    if hasher.size != info.size or got != info.digest:
        raise DigestMismatch(f"link {link.name}: vmstate", info.digest, got)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()
