"""Image manifests, indexes and configs: the OCI and Docker v2 schema2 shapes this builder reads.

:func:`parse_manifest_or_index` tells an index (OCI image index, Docker manifest list) from an image
manifest (OCI, Docker schema2) by its ``mediaType`` (or the registry's Content-Type, or its shape), and
:func:`select_platform` picks the ``linux/amd64`` entry of an index. :func:`parse_config` reads what a rootfs
needs from an image config (Env, WorkingDir, User, Entrypoint, Cmd, the layers' diff_ids).

Errors: :class:`MalformedImage` (bad JSON or shape), :class:`UnsupportedImage` (schema 1, artifacts such as
a forkd snapshot, unknown layer media types, digests other than sha256), :class:`PlatformNotFound`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import MalformedImage, PlatformNotFound, UnsupportedImage

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
#: what a registry client asks for (``Accept``)
ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))
CONFIG_TYPES = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")
LAYER_TYPES = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    }
)
PLATFORM = ("linux", "amd64")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a manifest or index says about a blob."""

    media_type: str
    digest: str
    size: int
    platform: str | None = None  # ``os/arch[/variant]`` in an index
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Index:
    media_type: str
    manifests: list[Descriptor]


@dataclass(frozen=True)
class Manifest:
    media_type: str
    config: Descriptor
    layers: list[Descriptor]


@dataclass(frozen=True)
class ImageConfig:
    """What the rootfs needs from an image config; ``raw`` is the config's ``config`` object as found."""

    os: str
    architecture: str
    env: list[str]
    working_dir: str | None
    user: str | None
    entrypoint: list[str] | None
    cmd: list[str] | None
    diff_ids: list[str]
    raw: dict[str, Any]


def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedImage(f"{what} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise MalformedImage(f"{what} is not a JSON object")
    return value


def parse_descriptor(value: Any, what: str) -> Descriptor:
    """A descriptor object. Raises MalformedImage, or UnsupportedImage for a digest that is not sha256."""
    if not isinstance(value, dict):
        raise MalformedImage(f"{what}: a descriptor is not an object")
    media_type, digest, size = value.get("mediaType"), value.get("digest"), value.get("size")
    if not isinstance(media_type, str) or not isinstance(digest, str) or not isinstance(size, int) or size < 0:
        raise MalformedImage(f"{what}: a descriptor needs mediaType, digest and size")
    if not _SHA256.fullmatch(digest):
        if re.fullmatch(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+", digest):
            raise UnsupportedImage(f"{what}: digest {digest!r} is not sha256 (the only algorithm verified here)")
        raise MalformedImage(f"{what}: {digest!r} is not a digest")
    platform = value.get("platform")
    platform_text = None
    if isinstance(platform, dict):
        parts = [str(platform.get("os", "")), str(platform.get("architecture", ""))]
        if platform.get("variant"):
            parts.append(str(platform["variant"]))
        platform_text = "/".join(parts)
    annotations = value.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise MalformedImage(f"{what}: annotations are not an object")
    return Descriptor(media_type, digest, size, platform_text, {str(k): str(v) for k, v in annotations.items()})


def parse_manifest_or_index(data: bytes, what: str, content_type: str | None = None) -> Index | Manifest:
    """An index or a manifest. Raises MalformedImage or UnsupportedImage."""
    doc = _json(data, what)
    media_type = doc.get("mediaType") or (content_type or "").split(";")[0].strip()
    if doc.get("schemaVersion") == 1 or ("signatures" in doc and "fsLayers" in doc):
        raise UnsupportedImage(f"{what}: Docker schema 1 manifests are not supported (re-push it as schema 2 or OCI)")
    if doc.get("schemaVersion") != 2:
        raise MalformedImage(f"{what}: schemaVersion is not 2")
    if media_type in INDEX_TYPES or (not media_type and "manifests" in doc):
        entries = doc.get("manifests")
        if not isinstance(entries, list):
            raise MalformedImage(f"{what}: an index without a manifests list")
        return Index(media_type or OCI_INDEX, [parse_descriptor(d, what) for d in entries])
    if media_type in MANIFEST_TYPES or (not media_type and "layers" in doc):
        layers = doc.get("layers")
        if not isinstance(layers, list):
            raise MalformedImage(f"{what}: a manifest without a layers list")
        config = parse_descriptor(doc.get("config"), what)
        if config.media_type not in CONFIG_TYPES:
            kind = doc.get("artifactType") or config.media_type
            raise UnsupportedImage(f"{what}: this is not a container image (its config is {kind!r})")
        descriptors = [parse_descriptor(d, what) for d in layers]
        for d in descriptors:
            if d.media_type not in LAYER_TYPES:
                raise UnsupportedImage(f"{what}: layer {d.digest} has media type {d.media_type!r}, not a tar layer")
        return Manifest(media_type or OCI_MANIFEST, config, descriptors)
    raise UnsupportedImage(f"{what}: media type {media_type!r} is neither an image manifest nor an index")


def select_platform(index: Index, what: str) -> Descriptor:
    """The ``linux/amd64`` manifest of ``index`` (no variant, or ``v1``, preferred). Raises PlatformNotFound
    naming the platforms present."""
    candidates = [
        d
        for d in index.manifests
        if d.platform
        and d.platform.split("/")[:2] == list(PLATFORM)
        and d.media_type in (*MANIFEST_TYPES, *INDEX_TYPES)
    ]
    candidates.sort(key=lambda d: 0 if d.platform in ("linux/amd64", "linux/amd64/v1") else 1)
    if candidates:
        return candidates[0]
    present = sorted({d.platform for d in index.manifests if d.platform and d.platform != "unknown/unknown"})
    raise PlatformNotFound(
        f"{what} has no linux/amd64 image (it has: {', '.join(present) or 'no platform entries'})", present
    )


def _strings(value: Any, what: str, name: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MalformedImage(f"{what}: {name} is not a list of strings")
    return list(value)


def parse_config(data: bytes, what: str) -> ImageConfig:
    """The parts of an image config a rootfs needs. Raises MalformedImage."""
    doc = _json(data, what)
    inner = doc.get("config") or {}
    rootfs = doc.get("rootfs") or {}
    if not isinstance(inner, dict) or not isinstance(rootfs, dict):
        raise MalformedImage(f"{what}: config and rootfs must be objects")
    diff_ids = _strings(rootfs.get("diff_ids", []), what, "rootfs.diff_ids") or []
    bad = next((d for d in diff_ids if not _SHA256.fullmatch(d)), None)
    if bad is not None:
        raise MalformedImage(f"{what}: diff_id {bad!r} is not sha256:<64 hex>")
    for name in ("WorkingDir", "User"):
        if inner.get(name) is not None and not isinstance(inner[name], str):
            raise MalformedImage(f"{what}: config.{name} is not a string")
    return ImageConfig(
        os=str(doc.get("os", "")),
        architecture=str(doc.get("architecture", "")),
        env=_strings(inner.get("Env"), what, "config.Env") or [],
        working_dir=inner.get("WorkingDir") or None,
        user=inner.get("User") or None,
        entrypoint=_strings(inner.get("Entrypoint"), what, "config.Entrypoint"),
        cmd=_strings(inner.get("Cmd"), what, "config.Cmd"),
        diff_ids=diff_ids,
        raw=inner,
    )


def check_platform(config: ImageConfig, what: str) -> None:
    """Refuse a config for anything but linux/amd64 (a single-platform image has no index to choose from)."""
    if (config.os, config.architecture) != PLATFORM:
        platform = f"{config.os}/{config.architecture}"
        raise PlatformNotFound(f"{what} is a {platform} image, not linux/amd64", [platform])
