"""The documents of a snapshot layer: descriptor, chunk map, config, layer manifest.

Each class parses from the exact bytes received (``from_json``), validating every
field and raising :class:`~manifest.errors.InvalidManifest` with the JSON path of
the first problem, and serialises deterministically (``to_json``) so the bytes a
client builds are the bytes it hashes and pushes. Digests are always taken over
those bytes, never over a re-serialisation. The normative spec is
docs/manifest-format.md; every example there is parsed by the test suite.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, overload

from . import mediatypes as mt
from .chunking import ChunkGeometry, validate_chunk_size
from .digest import Digest, digest_bytes, is_digest
from .errors import InvalidChunkSize, InvalidManifest
from .forkd_fields import check_forkd_fields
from .jsontext import loads as loads_json

MAX_MANIFEST_BYTES = 1 << 20
MAX_CONFIG_BYTES = 1 << 20
MAX_CHUNK_MAP_BYTES = 64 << 20
MAX_FILE_SIZE = 1 << 40
#: OCI-visible digests (manifests, configs, chunk maps, vmstates, data blobs) in format version 2.
OCI_ALGORITHM = "sha256"


def _version(media_type: Any, kind: str, path: str) -> int:
    version = mt.version_of(media_type if isinstance(media_type, str) else None, kind)
    if version is None:
        want = " or ".join(repr(t[kind]) for t in reversed(mt.VERSIONS.values()))
        raise InvalidManifest(f"{path} must be {want}, got {media_type!r}")
    return version


def _require_algorithm(digest: str | None, algorithm: str, where: str) -> None:
    if digest is not None and not digest.startswith(algorithm + ":"):
        raise InvalidManifest(f"{where} must be a {algorithm} digest in format version 2, got {digest[:80]!r}")


def canonical_json(obj: Any) -> bytes:
    """The one serialisation we produce: compact, key order as built, UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _load(data: bytes, limit: int, what: str) -> dict[str, Any]:
    if len(data) > limit:
        raise InvalidManifest(f"{what} is {len(data)} bytes, over the {limit}-byte limit")
    try:
        obj = loads_json(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidManifest(f"{what} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise InvalidManifest(f"{what} must be a JSON object")
    return obj


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str, *, optional: bool = False) -> Any:
    if key not in obj or obj[key] is None:
        if optional:
            return None
        raise InvalidManifest(f"{path}.{key} is required")
    value = obj[key]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise InvalidManifest(f"{path}.{key} has the wrong type ({type(value).__name__})")
    return value


@overload
def _digest(obj: dict[str, Any], key: str, path: str) -> str: ...
@overload
def _digest(obj: dict[str, Any], key: str, path: str, *, optional: bool) -> str | None: ...
def _digest(obj: dict[str, Any], key: str, path: str, *, optional: bool = False) -> str | None:
    value = _get(obj, key, str, path, optional=optional)
    if value is not None and not is_digest(value):
        raise InvalidManifest(f"{path}.{key} is not a valid digest: {value[:80]!r}")
    return value


def _size(obj: dict[str, Any], key: str, path: str, limit: int = MAX_FILE_SIZE) -> int:
    value = _get(obj, key, int, path)
    if not 0 <= value <= limit:
        raise InvalidManifest(f"{path}.{key} = {value} is out of range [0, {limit}]")
    return value


def _annotations(obj: dict[str, Any], path: str) -> dict[str, str]:
    ann = _get(obj, "annotations", dict, path, optional=True) or {}
    for k, v in ann.items():
        if not isinstance(v, str):
            raise InvalidManifest(f"{path}.annotations[{k!r}] must be a string")
    return dict(ann)


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what a blob is, its digest and its size."""

    media_type: str
    digest: str
    size: int
    annotations: dict[str, str] = field(default_factory=dict)
    artifact_type: str | None = None

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            obj["artifactType"] = self.artifact_type
        if self.annotations:
            obj["annotations"] = dict(sorted(self.annotations.items()))
        return obj

    @classmethod
    def from_obj(cls, obj: Any, path: str) -> Descriptor:
        if not isinstance(obj, dict):
            raise InvalidManifest(f"{path} must be an object")
        return cls(
            media_type=_get(obj, "mediaType", str, path),
            digest=_digest(obj, "digest", path),
            size=_size(obj, "size", path),
            annotations=_annotations(obj, path),
            artifact_type=_get(obj, "artifactType", str, path, optional=True),
        )

    @classmethod
    def for_bytes(cls, media_type: str, data: bytes, **annotations: str) -> Descriptor:
        """A descriptor of ``data``, addressed by sha256 (what every OCI tool verifies)."""
        return cls(media_type, str(digest_bytes(data, OCI_ALGORITHM)), len(data), dict(annotations))


@dataclass(frozen=True, slots=True)
class ChunkEntry:
    """One changed chunk: new data at ``(blobs[blob], offset, length)`` or, when ``digest`` is None, zeros."""

    index: int
    digest: str | None
    blob: int = -1
    offset: int = 0
    length: int = 0

    @property
    def is_zero(self) -> bool:
        return self.digest is None

    def to_obj(self) -> list[Any]:
        if self.digest is None:
            return [self.index, None]
        return [self.index, self.digest, self.blob, self.offset, self.length]


@dataclass(frozen=True)
class ChunkMap:
    """How to turn the parent's file (or nothing) into this layer's file."""

    file: str
    size: int
    chunk_size: int
    digest: str
    parent_digest: str | None
    blobs: tuple[str, ...]
    entries: tuple[ChunkEntry, ...]
    compression: str = "zstd"
    version: int = mt.FORMAT_VERSION
    """Format version: 2 names the file by its chunk tree (manifest.chunktree), 1 by blake3 of its bytes."""

    def to_obj(self) -> dict[str, Any]:
        return {
            "mediaType": mt.VERSIONS[self.version]["chunkmap"],
            "file": self.file,
            "size": self.size,
            "chunkSize": self.chunk_size,
            "digest": self.digest,
            "parentDigest": self.parent_digest,
            "compression": self.compression,
            "blobs": list(self.blobs),
            "chunks": [e.to_obj() for e in self.entries],
        }

    def to_json(self) -> bytes:
        return canonical_json(self.to_obj())

    @classmethod
    def from_json(cls, data: bytes, *, limit: int = MAX_CHUNK_MAP_BYTES) -> ChunkMap:
        obj = _load(data, limit, "chunk map")
        p = "chunkmap"
        version = _version(obj.get("mediaType"), "chunkmap", f"{p}.mediaType")
        file = _get(obj, "file", str, p)
        if file not in mt.CHUNKED_FILES:
            raise InvalidManifest(f"{p}.file {file!r} is not a chunked file role {mt.CHUNKED_FILES}")
        if _get(obj, "compression", str, p) != "zstd":
            raise InvalidManifest(f"{p}.compression must be 'zstd'")
        try:
            geometry = ChunkGeometry(_size(obj, "size", p), _get(obj, "chunkSize", int, p))
        except InvalidChunkSize as e:
            raise InvalidManifest(f"{p}.chunkSize: {e}") from None
        blobs = _get(obj, "blobs", list, p)
        for i, b in enumerate(blobs):
            if not isinstance(b, str) or not is_digest(b):
                raise InvalidManifest(f"{p}.blobs[{i}] is not a valid digest")
        if len(set(blobs)) != len(blobs):
            raise InvalidManifest(f"{p}.blobs lists a blob twice")
        entries = tuple(_parse_entries(_get(obj, "chunks", list, p), geometry, len(blobs)))
        digest, parent_digest = _digest(obj, "digest", p), _digest(obj, "parentDigest", p, optional=True)
        if version >= 2:
            _require_algorithm(digest, "blake3", f"{p}.digest")
            _require_algorithm(parent_digest, "blake3", f"{p}.parentDigest")
            for i, b in enumerate(blobs):
                _require_algorithm(b, OCI_ALGORITHM, f"{p}.blobs[{i}]")
        return cls(
            file, geometry.size, geometry.chunk_size, digest, parent_digest, tuple(blobs), entries, version=version
        )


#: blake3 digests one per line: every line is what is_digest accepts of a blake3 digest (71 characters)
_BLAKE3_LINES = re.compile(r"(?:blake3:[0-9a-f]{64}\n)*")


def _parse_entries(items: list[Any], geometry: ChunkGeometry, nblobs: int) -> list[ChunkEntry]:
    out: list[ChunkEntry] = []
    last = -1
    max_frame = geometry.chunk_size + (geometry.chunk_size >> 3) + 1024  # zstd worst case is ~chunk + small overhead
    count, append = geometry.count, out.append
    # fast path (a map holds tens of thousands of entries, parsed before a lazy fork's first
    # answer): every data entry's digest checked by one regex pass when all are 71 characters
    # long, then a well-formed entry accepted in one test; anything else takes the checks below,
    # which accept the same entries and name what is wrong with the others
    digests = [item[1] for item in items if type(item) is list and len(item) == 5 and type(item[1]) is str]
    fast = all(len(d) == 71 for d in digests) and _BLAKE3_LINES.fullmatch("".join(d + "\n" for d in digests))
    for i, item in enumerate(items):
        if fast and type(item) is list and len(item) == 5:
            index, digest, blob, offset, length = item
            if (
                type(index) is int
                and last < index < count
                and type(digest) is str
                and type(blob) is int
                and 0 <= blob < nblobs
                and type(offset) is int
                and 0 <= offset <= MAX_FILE_SIZE
                and type(length) is int
                and 0 < length <= max_frame
            ):
                append(ChunkEntry(index, digest, blob, offset, length))
                last = index
                continue
        where = f"chunkmap.chunks[{i}]"
        if not isinstance(item, list) or len(item) not in (2, 5):
            raise InvalidManifest(f"{where} must be [index, null] or [index, digest, blob, offset, length]")
        index = item[0]
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < geometry.count:
            raise InvalidManifest(f"{where}: chunk index {index!r} is out of range (file has {geometry.count} chunks)")
        if index <= last:
            raise InvalidManifest(f"{where}: chunk indexes must be strictly increasing ({index} after {last})")
        last = index
        if len(item) == 2:
            if item[1] is not None:
                raise InvalidManifest(f"{where}: a two-element entry must be [index, null] (a zero chunk)")
            out.append(ChunkEntry(index, None))
            continue
        _, digest, blob, offset, length = item
        if not isinstance(digest, str) or not is_digest(digest) or not digest.startswith("blake3:"):
            raise InvalidManifest(f"{where}: chunk digest is not a valid blake3 digest")
        for name, value, hi in (
            ("blob", blob, nblobs - 1),
            ("offset", offset, MAX_FILE_SIZE),
            ("length", length, max_frame),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
                raise InvalidManifest(f"{where}: {name} {value!r} is out of range [0, {hi}]")
        if length == 0:
            raise InvalidManifest(f"{where}: frame length must be positive")
        out.append(ChunkEntry(index, digest, blob, offset, length))
    return out


@dataclass(frozen=True)
class FileInfo:
    """The content of one file at this layer: size and content hashes of the assembled file.

    ``digest`` is, in format version 2, the chunk-tree digest for a chunked file
    (manifest.chunktree) and blake3 of the bytes for vmstate; ``sha256`` is always over the bytes."""

    size: int
    digest: str
    sha256: str | None = None
    chunk_size: int | None = None

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"size": self.size, "digest": self.digest}
        if self.sha256:
            obj["sha256"] = self.sha256
        if self.chunk_size:
            obj["chunkSize"] = self.chunk_size
        return obj


@dataclass(frozen=True)
class ParentRef:
    """The layer this one applies to: by manifest digest (immutable) and by tag (human)."""

    digest: str
    tag: str | None = None


@dataclass(frozen=True)
class LayerConfig:
    """The config blob of a layer: parent, compatibility, file content hashes, annotations."""

    created: str
    files: dict[str, FileInfo]
    parent: ParentRef | None = None
    compat: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    #: forkd's snapshot.json fields a pull cannot derive (``volumes``, a ``rootfs`` outside the
    #: snapshot directory, unknown fields), kept verbatim; absent when there are none
    forkd: dict[str, Any] | None = None
    version: int = mt.FORMAT_VERSION

    def to_obj(self) -> dict[str, Any]:
        obj = {
            "mediaType": mt.VERSIONS[self.version]["config"],
            "created": self.created,
            "parent": None if self.parent is None else {"digest": self.parent.digest, "tag": self.parent.tag},
            "compat": dict(self.compat),
            "files": {name: self.files[name].to_obj() for name in mt.FILE_ROLES if name in self.files},
            "annotations": dict(sorted(self.annotations.items())),
        }
        if self.forkd:
            obj["forkd"] = dict(self.forkd)
        return obj

    def to_json(self) -> bytes:
        return canonical_json(self.to_obj())

    @classmethod
    def from_json(cls, data: bytes, *, limit: int = MAX_CONFIG_BYTES) -> LayerConfig:
        obj = _load(data, limit, "config")
        p = "config"
        version = _version(obj.get("mediaType"), "config", f"{p}.mediaType")
        parent = None
        pobj = _get(obj, "parent", dict, p, optional=True)
        if pobj is not None:
            parent = ParentRef(
                _digest(pobj, "digest", f"{p}.parent"), _get(pobj, "tag", str, f"{p}.parent", optional=True)
            )
        compat = _get(obj, "compat", dict, p, optional=True) or {}
        for key, value in compat.items():
            want = mt.COMPAT_FIELDS.get(key, (str, int))
            if isinstance(value, bool) or not isinstance(value, want):
                raise InvalidManifest(f"{p}.compat.{key} has the wrong type ({type(value).__name__})")
        files: dict[str, FileInfo] = {}
        for name, fobj in _get(obj, "files", dict, p).items():
            where = f"{p}.files[{name!r}]"
            if name not in mt.FILE_ROLES:
                raise InvalidManifest(f"{where}: unknown file role (allowed: {', '.join(mt.FILE_ROLES)})")
            if not isinstance(fobj, dict):
                raise InvalidManifest(f"{where} must be an object")
            sha = _digest(fobj, "sha256", where, optional=True)
            if sha is not None and not sha.startswith("sha256:"):
                raise InvalidManifest(f"{where}.sha256 must be a sha256 digest")
            chunk_size = _get(fobj, "chunkSize", int, where, optional=True)
            if chunk_size is not None:
                try:
                    validate_chunk_size(chunk_size)
                except InvalidChunkSize as e:
                    raise InvalidManifest(f"{where}.chunkSize: {e}") from None
            info = FileInfo(_size(fobj, "size", where), _digest(fobj, "digest", where), sha, chunk_size)
            if version >= 2:
                _require_algorithm(info.digest, "blake3", f"{where}.digest")
                if sha is None:
                    raise InvalidManifest(f"{where}.sha256 is required in format version 2")
                if name in mt.CHUNKED_FILES and chunk_size is None:
                    raise InvalidManifest(f"{where}.chunkSize is required for a chunked file in format version 2")
            files[name] = info
        for required in (mt.VMSTATE_FILE, mt.MEMORY_FILE):
            if required not in files:
                raise InvalidManifest(f"{p}.files must describe {required!r}")
        forkd = _get(obj, "forkd", dict, p, optional=True)
        if forkd is not None:
            check_forkd_fields(forkd, f"{p}.forkd")
        if version >= 2 and parent is not None:
            _require_algorithm(parent.digest, OCI_ALGORITHM, f"{p}.parent.digest")
        return cls(
            _get(obj, "created", str, p),
            files,
            parent,
            dict(compat),
            _annotations(obj, p),
            forkd or None,
            version=version,
        )


@dataclass(frozen=True)
class LayerManifest:
    """An OCI image manifest whose ``artifactType`` says it is a forkd snapshot layer."""

    config: Descriptor
    layers: tuple[Descriptor, ...]
    annotations: dict[str, str] = field(default_factory=dict)
    version: int = mt.FORMAT_VERSION

    @property
    def vmstate(self) -> Descriptor:
        return next(d for d in self.layers if d.media_type in mt.VMSTATES)

    @property
    def chunk_maps(self) -> dict[str, Descriptor]:
        return {d.annotations[mt.ANNOTATION_FILE]: d for d in self.layers if d.media_type in mt.CHUNK_MAPS}

    @property
    def data_blobs(self) -> tuple[Descriptor, ...]:
        return tuple(d for d in self.layers if d.media_type in mt.DATA_BLOBS)

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": mt.OCI_MANIFEST,
            "artifactType": mt.VERSIONS[self.version]["layer"],
            "config": self.config.to_obj(),
            "layers": [d.to_obj() for d in self.layers],
        }
        if self.annotations:
            obj["annotations"] = dict(sorted(self.annotations.items()))
        return obj

    def to_json(self) -> bytes:
        return canonical_json(self.to_obj())

    @classmethod
    def from_json(cls, data: bytes, *, limit: int = MAX_MANIFEST_BYTES) -> LayerManifest:
        obj = _load(data, limit, "manifest")
        p = "manifest"
        if obj.get("schemaVersion") != 2:
            raise InvalidManifest(f"{p}.schemaVersion must be 2")
        if obj.get("mediaType") != mt.OCI_MANIFEST:
            raise InvalidManifest(f"{p}.mediaType must be {mt.OCI_MANIFEST!r}")
        version = _version(obj.get("artifactType"), "layer", f"{p}.artifactType")
        types = mt.VERSIONS[version]
        config = Descriptor.from_obj(obj.get("config"), f"{p}.config")
        if config.media_type != types["config"]:
            raise InvalidManifest(f"{p}.config.mediaType must be {types['config']!r}")
        layers = tuple(Descriptor.from_obj(d, f"{p}.layers[{i}]") for i, d in enumerate(_get(obj, "layers", list, p)))
        _check_layers(layers, version)
        if version >= 2:
            _require_algorithm(config.digest, OCI_ALGORITHM, f"{p}.config.digest")
            for i, d in enumerate(layers):
                _require_algorithm(d.digest, OCI_ALGORITHM, f"{p}.layers[{i}].digest")
        return cls(config, layers, _annotations(obj, p), version=version)


def _check_layers(layers: tuple[Descriptor, ...], version: int) -> None:
    types = mt.VERSIONS[version]
    known = {types["vmstate"], types["chunkmap"], types["data"]}
    seen_files: set[str] = set()
    seen_digests: set[str] = set()
    for i, d in enumerate(layers):
        where = f"manifest.layers[{i}]"
        if d.media_type not in known:
            raise InvalidManifest(
                f"{where}.mediaType {d.media_type!r} is not a forkd layer blob type of format version {version}"
            )
        if d.digest in seen_digests:
            raise InvalidManifest(f"{where} lists blob {d.digest} twice")
        seen_digests.add(d.digest)
        if d.media_type == types["chunkmap"]:
            file = d.annotations.get(mt.ANNOTATION_FILE)
            if file not in mt.CHUNKED_FILES:
                raise InvalidManifest(f"{where}: chunk map needs annotation {mt.ANNOTATION_FILE} in {mt.CHUNKED_FILES}")
            if file in seen_files:
                raise InvalidManifest(f"{where}: a second chunk map for {file!r}")
            seen_files.add(file)
    if sum(d.media_type == types["vmstate"] for d in layers) != 1:
        raise InvalidManifest("manifest.layers must hold exactly one vmstate blob")
    if mt.MEMORY_FILE not in seen_files:
        raise InvalidManifest(f"manifest.layers must hold a chunk map for {mt.MEMORY_FILE!r}")


def manifest_digest(data: bytes, algorithm: str = OCI_ALGORITHM) -> str:
    """The digest of a manifest is the digest of its exact bytes."""
    return str(digest_bytes(data, algorithm))


def chain_index(layers: list[Descriptor], annotations: dict[str, str] | None = None) -> bytes:
    """An OCI image index listing a chain base → head, so generic registries keep it reachable."""
    obj: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_INDEX,
        "artifactType": mt.CHAIN_ARTIFACT,
        "manifests": [d.to_obj() for d in layers],
        "annotations": {mt.ANNOTATION_CHAIN_DEPTH: str(len(layers)), **(annotations or {})},
    }
    return canonical_json(obj)


__all__ = [
    "ChunkEntry",
    "ChunkMap",
    "Descriptor",
    "Digest",
    "FileInfo",
    "LayerConfig",
    "LayerManifest",
    "ParentRef",
    "canonical_json",
    "chain_index",
    "manifest_digest",
]
