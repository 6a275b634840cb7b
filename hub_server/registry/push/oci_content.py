"""Generic OCI content: the structural checks of a pushed manifest that is not a forkd document.

Accepted (docs/http-api.md, "OCI conformance"): OCI image manifests (artifacts included:
``artifactType``, empty descriptors, ``data`` fields, ``subject``), OCI image indexes (nested),
Docker schema 2 manifests and manifest lists. The bytes are stored exactly as received, so
unknown fields are kept; only the fields below are read and checked:

- ``schemaVersion`` is 2; ``mediaType`` (or, when absent, the ``Content-Type``) is one of the
  four types, and agrees with the ``Content-Type`` when both are given;
- every descriptor has a ``mediaType`` (type/subtype), a valid ``digest``, a ``size`` ≥ 0,
  optional ``urls`` (strings), ``annotations`` (string → string), ``artifactType`` (type/subtype)
  and ``data`` (base64 of exactly ``size`` bytes hashing to ``digest``);
- an image manifest has a ``config`` descriptor and a ``layers`` list; an index a ``manifests`` list.

:func:`is_forkd_document` is the dispatch: forkd media types go to ``registry.verify``.

Errors: ``HubError(MANIFEST_INVALID)`` naming the field, ``HubError(UNSUPPORTED)`` for other
manifest types (Docker schema 1).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hub_server.errors import ErrorCode, HubError
from hub_server.registry.push.verify import invalid
from manifest import mediatypes as mt
from manifest.digest import Digest, digest_bytes
from manifest.errors import InvalidDigest
from manifest.jsontext import loads as loads_json

__all__ = [
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_LIST",
    "IMAGE_TYPES",
    "INDEX_TYPES",
    "OCI_INDEX",
    "OciDescriptor",
    "OciDocument",
    "is_forkd_document",
    "load_manifest_json",
    "parse_oci_document",
]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = mt.OCI_INDEX
IMAGE_TYPES = (mt.OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (mt.OCI_INDEX, DOCKER_MANIFEST_LIST)
#: Layers whose content lives elsewhere (``urls``): the registry need not hold them.
FOREIGN_LAYER_TYPES = (
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
)
_FORKD_ARTIFACTS = (*mt.LAYER_ARTIFACTS, mt.CHAIN_ARTIFACT)
_GENERIC_CONTENT_TYPES = ("", "application/json", "application/octet-stream")
# RFC 6838 type/subtype (with structured-syntax suffix and parameters kept out).
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}")


@dataclass(frozen=True)
class OciDescriptor:
    media_type: str
    digest: str
    size: int
    artifact_type: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    urls: tuple[str, ...] = ()

    @property
    def foreign(self) -> bool:
        """Content the registry need not hold (a foreign or non-distributable layer with ``urls``)."""
        return self.media_type in FOREIGN_LAYER_TYPES


@dataclass(frozen=True)
class OciDocument:
    """What the registry needs to know of a generic manifest (the bytes themselves are kept as sent)."""

    media_type: str
    artifact_type: str | None
    """The referrers API's artifact type: ``artifactType``, else (image manifests) the config's media type."""
    config: OciDescriptor | None = None
    layers: tuple[OciDescriptor, ...] = ()
    manifests: tuple[OciDescriptor, ...] = ()
    subject: OciDescriptor | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def blobs(self) -> tuple[OciDescriptor, ...]:
        """Descriptors of blobs the repository must hold (config and layers, foreign layers excepted)."""
        return tuple(d for d in (self.config, *self.layers) if d is not None and not d.foreign)


def load_manifest_json(body: bytes) -> dict[str, Any]:
    """The pushed manifest as a JSON object. Raises HubError(MANIFEST_INVALID)."""
    try:
        obj = loads_json(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise invalid(f"manifest is not valid UTF-8 JSON: {e}") from None
    if not isinstance(obj, dict):
        raise invalid("manifest must be a JSON object")
    return obj


def is_forkd_document(obj: dict[str, Any]) -> bool:
    """Whether a parsed manifest is a forkd layer manifest or chain index (verified by ``registry.verify``)."""
    config = obj.get("config")
    return obj.get("artifactType") in _FORKD_ARTIFACTS or (
        isinstance(config, dict) and config.get("mediaType") in mt.CONFIGS
    )


def parse_oci_document(obj: dict[str, Any], content_type: str | None) -> OciDocument:
    """Check a generic manifest's structure (module docstring). Raises HubError(MANIFEST_INVALID / UNSUPPORTED)."""
    declared = (content_type or "").split(";")[0].strip()
    media_type = obj.get("mediaType", declared if declared not in _GENERIC_CONTENT_TYPES else None)
    if media_type is None:
        raise invalid(
            "manifest.mediaType is missing and the Content-Type does not name a manifest type", field="mediaType"
        )
    if not isinstance(media_type, str):
        raise invalid("manifest.mediaType must be a string", field="mediaType")
    if declared not in _GENERIC_CONTENT_TYPES and declared != media_type:
        raise invalid(f"Content-Type {declared!r} does not match manifest.mediaType {media_type!r}", field="mediaType")
    if media_type not in IMAGE_TYPES + INDEX_TYPES:
        raise HubError(
            ErrorCode.UNSUPPORTED,
            f"manifest type {media_type[:120]!r} is not supported (use an OCI "
            "image manifest or index, or a Docker schema 2 manifest or manifest list)",
            {"mediaType": media_type[:120]},
        )
    if obj.get("schemaVersion") != 2:
        raise invalid("manifest.schemaVersion must be 2", field="schemaVersion")
    artifact_type = _optional_media_type(obj, "artifactType", "manifest")
    subject = _descriptor(obj["subject"], "subject") if "subject" in obj else None
    annotations = _annotations(obj, "manifest")
    if media_type in INDEX_TYPES:
        manifests = _descriptor_list(obj, "manifests")
        return OciDocument(media_type, artifact_type, manifests=manifests, subject=subject, annotations=annotations)
    if "config" not in obj:
        raise invalid("manifest.config is missing", field="config")
    config = _descriptor(obj["config"], "config")
    layers = _descriptor_list(obj, "layers")
    return OciDocument(
        media_type,
        artifact_type or config.media_type,
        config=config,
        layers=layers,
        subject=subject,
        annotations=annotations,
    )


def _descriptor_list(obj: dict[str, Any], key: str) -> tuple[OciDescriptor, ...]:
    items = obj.get(key)
    if not isinstance(items, list):
        raise invalid(f"manifest.{key} must be a list", field=key)
    return tuple(_descriptor(item, f"{key}[{i}]") for i, item in enumerate(items))


def _descriptor(obj: Any, path: str) -> OciDescriptor:
    if not isinstance(obj, dict):
        raise invalid(f"{path} must be a descriptor object", field=path)
    media_type = obj.get("mediaType")
    if not isinstance(media_type, str) or not _MEDIA_TYPE.fullmatch(media_type):
        raise invalid(f"{path}.mediaType must be a media type such as 'application/json'", field=path)
    raw_digest = obj.get("digest")
    try:
        digest = Digest.parse(raw_digest) if isinstance(raw_digest, str) else None
    except InvalidDigest as e:
        raise invalid(f"{path}.digest: {e}", field=path) from None
    if digest is None:
        raise invalid(f"{path}.digest must be a digest string", field=path)
    size = obj.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise invalid(f"{path}.size must be a non-negative integer", field=path)
    urls = obj.get("urls", [])
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise invalid(f"{path}.urls must be a list of strings", field=path)
    if "data" in obj:
        _check_data(obj["data"], digest, size, path)
    return OciDescriptor(
        media_type,
        str(digest),
        size,
        _optional_media_type(obj, "artifactType", path),
        _annotations(obj, path),
        tuple(urls),
    )


def _check_data(data: Any, digest: Digest, size: int, path: str) -> None:
    try:
        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except binascii.Error:
        raw = None
    if raw is None:
        raise invalid(f"{path}.data must be base64", field=path)
    if len(raw) != size or digest_bytes(raw, digest.algorithm) != digest:
        raise invalid(f"{path}.data does not match the descriptor's size and digest", field=path)


def _optional_media_type(obj: dict[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _MEDIA_TYPE.fullmatch(value):
        raise invalid(f"{path}.{key} must be a media type such as 'application/vnd.example+json'", field=path)
    return value


def _annotations(obj: dict[str, Any], path: str) -> dict[str, str]:
    value = obj.get("annotations", {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise invalid(f"{path}.annotations must map strings to strings", field=path)
    return dict(value)
