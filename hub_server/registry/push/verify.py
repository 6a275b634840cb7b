"""The checks a pushed manifest must pass, each failure a typed wire error.

Pure checks on parsed documents (chunk maps against the config and the parent's config) and
the one expensive check: every chunk frame not verified before is read back from its data
blob and decompressed (bounded by the chunk length) to bytes that must hash to its chunk
digest. Reads are coalesced — frames sorted by blob and offset, neighbours read as one range —
and decompression runs in worker threads.

Errors: ``HubError`` with ``MANIFEST_INVALID`` or ``DIGEST_INVALID`` (detail names the blob,
offset, file and chunk index).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from hub_server.errors import ErrorCode, HubError
from manifest import mediatypes as mt
from manifest.assemble import decompress_chunk
from manifest.errors import ManifestError
from manifest.model import ChunkMap, Descriptor, LayerConfig, LayerManifest

__all__ = [
    "ChainIndex",
    "FrameCheck",
    "check_chunk_map",
    "check_media_type",
    "invalid",
    "parse_chain_index",
    "parse_layer",
    "plan_frames",
    "require_utf8",
    "shared_bytes",
    "verify_frames",
]

#: Frames closer than this are read in one request; runs stop growing at MAX_RUN.
COALESCE_GAP = 256 << 10
MAX_RUN = 16 << 20


def invalid(message: str, **detail: Any) -> HubError:
    return HubError(ErrorCode.MANIFEST_INVALID, message, detail)


@dataclass(frozen=True)
class ChainIndex:
    """An OCI image index listing a chain's layer manifests base → head (manifest-format §7)."""

    manifests: tuple[Descriptor, ...]
    annotations: dict[str, str] = field(default_factory=dict)


def check_media_type(obj: dict[str, Any], content_type: str | None) -> None:
    """A forkd document's declared ``Content-Type`` must be its ``mediaType`` (or a generic JSON type).

    Raises: HubError(MANIFEST_INVALID).
    """
    media_type = obj.get("mediaType")
    declared = (content_type or "").split(";")[0].strip()
    if declared and declared not in ("application/json", "application/octet-stream") and declared != media_type:
        raise invalid(f"Content-Type {declared!r} does not match manifest.mediaType {media_type!r}", field="mediaType")


def parse_layer(body: bytes, limit: int) -> LayerManifest:
    """A pushed forkd layer manifest. Raises: HubError(MANIFEST_INVALID) naming the field."""
    try:
        return LayerManifest.from_json(body, limit=limit)
    except ManifestError as e:
        raise invalid(str(e)) from None


def require_utf8(raw: bytes, what: str) -> None:
    """Manifests and configs are served as JSON strings (chain endpoint): they must be UTF-8.

    Raises: HubError(MANIFEST_INVALID).
    """
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise invalid(f"{what} is not UTF-8 JSON: {e}") from None


def parse_chain_index(obj: dict[str, Any]) -> ChainIndex:
    """A pushed chain index (manifest-format §7). Raises: HubError(MANIFEST_INVALID) naming the field."""
    try:
        return _parse_index(obj)
    except ManifestError as e:
        raise invalid(str(e)) from None


def _parse_index(obj: dict[str, Any]) -> ChainIndex:
    if obj.get("schemaVersion") != 2:
        raise invalid("index.schemaVersion must be 2", field="schemaVersion")
    if obj.get("artifactType") != mt.CHAIN_ARTIFACT:
        raise invalid(f"index.artifactType must be {mt.CHAIN_ARTIFACT!r}", field="artifactType")
    items = obj.get("manifests")
    if not isinstance(items, list) or not items:
        raise invalid("index.manifests must be a non-empty list", field="manifests")
    descriptors = tuple(Descriptor.from_obj(d, f"index.manifests[{i}]") for i, d in enumerate(items))
    for i, d in enumerate(descriptors):
        if d.media_type != mt.OCI_MANIFEST:
            raise invalid(f"index.manifests[{i}].mediaType must be {mt.OCI_MANIFEST!r}", field=f"manifests[{i}]")
    if len({d.digest for d in descriptors}) != len(descriptors):
        raise invalid("index.manifests lists a manifest twice", field="manifests")
    annotations = obj.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise invalid("index.annotations must map strings to strings", field="annotations")
    return ChainIndex(descriptors, dict(annotations))


def check_chunk_map(
    chunk_map: ChunkMap,
    descriptor: Descriptor,
    config: LayerConfig,
    parent_config: LayerConfig | None,
    data_blobs: set[str],
) -> None:
    """A chunk map must agree with its descriptor, the config, the parent's config and the data blobs listed.

    Raises: HubError(MANIFEST_INVALID).
    """
    where = f"chunk map {descriptor.digest} ({chunk_map.file})"
    annotated = descriptor.annotations.get(mt.ANNOTATION_FILE)
    if annotated != chunk_map.file:
        raise invalid(
            f"{where}: descriptor says file {annotated!r}, the map says {chunk_map.file!r}",
            digest=descriptor.digest,
            field="file",
        )
    missing = sorted(set(chunk_map.blobs) - data_blobs)
    if missing:
        raise invalid(
            f"{where}: blobs {missing} are not listed as data blobs in the manifest",
            digest=descriptor.digest,
            field="blobs",
            blobs=missing,
        )
    info = config.files.get(chunk_map.file)
    if info is None:
        raise invalid(
            f"{where}: config.files has no entry for {chunk_map.file!r}", digest=descriptor.digest, field="files"
        )
    if info.digest != chunk_map.digest or info.size != chunk_map.size:
        raise invalid(
            f"{where}: digest/size {chunk_map.digest}/{chunk_map.size} differ from config.files "
            f"{info.digest}/{info.size}",
            digest=descriptor.digest,
            field="digest",
        )
    if info.chunk_size is not None and info.chunk_size != chunk_map.chunk_size:
        raise invalid(
            f"{where}: chunkSize {chunk_map.chunk_size} differs from config.files ({info.chunk_size})",
            digest=descriptor.digest,
            field="chunkSize",
        )
    parent_file = parent_config.files.get(chunk_map.file) if parent_config is not None else None
    expected_parent = parent_file.digest if parent_file is not None else None
    if chunk_map.parent_digest != expected_parent:
        raise invalid(
            f"{where}: parentDigest {chunk_map.parent_digest} should be {expected_parent} "
            "(the parent layer's file digest, or null)",
            digest=descriptor.digest,
            field="parentDigest",
        )


def check_config_files(manifest: LayerManifest, config: LayerConfig) -> None:
    """Every chunked file the config describes needs a chunk map. Raises HubError(MANIFEST_INVALID)."""
    for file in mt.CHUNKED_FILES:
        if file in config.files and file not in manifest.chunk_maps:
            raise invalid(f"config describes {file!r} but the manifest has no chunk map for it", field="layers")


def shared_bytes(maps: Iterable[ChunkMap], parent_config: LayerConfig | None) -> int:
    """Bytes of the parent's files this layer reuses unchanged (logical size minus changed chunks)."""
    if parent_config is None:
        return 0
    total = 0
    for cm in maps:
        if cm.file not in parent_config.files:
            continue
        changed = sum(min(cm.chunk_size, cm.size - e.index * cm.chunk_size) for e in cm.entries)
        total += cm.size - changed
    return total


@dataclass(frozen=True, slots=True)
class FrameCheck:
    """One chunk frame to check: ``length`` bytes at ``offset`` in ``blob`` must decompress to
    ``raw_length`` bytes hashing to ``digest`` (``file``/``index`` name it in errors)."""

    blob: str
    offset: int
    length: int
    digest: str
    raw_length: int
    file: str
    index: int

    @property
    def location(self) -> tuple[str, int, int, str]:
        return (self.blob, self.offset, self.length, self.digest)


def plan_frames(maps: Iterable[ChunkMap]) -> list[FrameCheck]:
    """Every distinct data chunk frame the maps point at, sorted by blob and offset."""
    seen: dict[tuple[str, int, int, str, int], FrameCheck] = {}
    for cm in maps:
        for e in cm.entries:
            if e.digest is None:
                continue
            raw = min(cm.chunk_size, cm.size - e.index * cm.chunk_size)
            check = FrameCheck(cm.blobs[e.blob], e.offset, e.length, e.digest, raw, cm.file, e.index)
            seen.setdefault((check.blob, check.offset, check.length, check.digest, raw), check)
    return sorted(seen.values(), key=lambda c: (c.blob, c.offset))


def _runs(checks: list[FrameCheck]) -> list[list[FrameCheck]]:
    runs: list[list[FrameCheck]] = []
    end = 0  # where the last run's frames end
    for c in checks:
        if runs:
            run = runs[-1]
            if (
                c.blob == run[0].blob
                and c.offset <= end + COALESCE_GAP
                and c.offset + c.length - run[0].offset <= MAX_RUN
            ):
                run.append(c)
                end = max(end, c.offset + c.length)
                continue
        runs.append([c])
        end = c.offset + c.length
    return runs


def _check_run(data: bytes, start: int, run: list[FrameCheck]) -> None:
    for c in run:
        frame = data[c.offset - start : c.offset - start + c.length]
        what = f"{c.file} chunk {c.index} ({c.digest}) in blob {c.blob} at offset {c.offset}"
        try:
            decompress_chunk(frame, c.raw_length, c.digest, what)
        except ManifestError as e:
            raise HubError(
                ErrorCode.DIGEST_INVALID,
                f"chunk frame does not match its chunk map entry: {e}",
                {
                    "blob": c.blob,
                    "offset": c.offset,
                    "length": c.length,
                    "file": c.file,
                    "chunk": c.index,
                    "digest": c.digest,
                },
            ) from None


#: ``(blob digest, offset, length) -> bytes``: how stored blob ranges are read (registry/content/recipes.py).
RangeReader = Callable[[str, int, int], Awaitable[bytes]]


async def verify_frames(read: RangeReader, checks: list[FrameCheck], blob_sizes: dict[str, int]) -> None:
    """Read (through ``read``) and verify every frame in ``checks`` (sorted as :func:`plan_frames` returns them).

    Raises: HubError(MANIFEST_INVALID) for a frame past the end of its blob,
    HubError(DIGEST_INVALID) for a frame that does not decompress to its chunk.
    """
    for c in checks:
        size = blob_sizes.get(c.blob)
        if size is None or c.offset + c.length > size:
            raise invalid(
                f"{c.file} chunk {c.index}: frame {c.offset}+{c.length} lies outside blob {c.blob} ({size} bytes)",
                blob=c.blob,
                offset=c.offset,
                chunk=c.index,
                file=c.file,
            )
    for run in _runs(checks):
        start = run[0].offset
        end = max(c.offset + c.length for c in run)
        data = await read(run[0].blob, start, end - start)
        await anyio.to_thread.run_sync(_check_run, data, start, run)
