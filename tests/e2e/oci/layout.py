"""Small OCI images and artifacts built in Python, as OCI image-layout directories or as raw parts.

``image_parts`` makes a one-layer image (gzip tar layer, image config, image manifest) with
deterministic bytes; ``write_layout`` writes an ``oci-layout`` directory (image-spec
"image-layout": ``oci-layout``, ``index.json``, ``blobs/<alg>/<hex>``) that ``skopeo copy oci:DIR:TAG``
reads; ``read_layout`` reads one back for byte comparisons.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
EMPTY_JSON = "application/vnd.oci.empty.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, content: bytes, **extra: object) -> dict[str, object]:
    """The descriptor of ``content`` (``extra``: more fields, e.g. ``data``, ``platform``, ``annotations``)."""
    return {"mediaType": media_type, "digest": sha256(content), "size": len(content), **extra}


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass
class Image:
    """An image's parts: ``blobs`` maps digest → bytes (config and layers); ``manifest`` is its bytes."""

    manifest: bytes
    blobs: dict[str, bytes] = field(default_factory=dict)
    media_type: str = OCI_MANIFEST

    @property
    def digest(self) -> str:
        return sha256(self.manifest)


def layer_tar(files: dict[str, bytes]) -> tuple[bytes, bytes]:
    """A deterministic gzip tar of ``files``: (compressed, uncompressed)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
    uncompressed = raw.getvalue()
    return gzip.compress(uncompressed, mtime=0), uncompressed


def image_parts(files: dict[str, bytes], *, annotations: dict[str, str] | None = None) -> Image:
    layer, uncompressed = layer_tar(files)
    config = dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [sha256(uncompressed)]}}
    )
    manifest: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, config),
        "layers": [descriptor(OCI_LAYER, layer)],
    }
    if annotations:
        manifest["annotations"] = annotations
    return Image(dumps(manifest), {sha256(config): config, sha256(layer): layer})


def write_layout(path: Path, images: dict[str, Image]) -> Path:
    """An OCI image layout at ``path`` holding ``images`` by tag (``ref.name``)."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (path / "oci-layout").write_bytes(dumps({"imageLayoutVersion": "1.0.0"}))
    entries = []
    for tag, image in images.items():
        for digest, data in {**image.blobs, image.digest: image.manifest}.items():
            (blobs / digest.split(":")[1]).write_bytes(data)
        entries.append(descriptor(image.media_type, image.manifest, annotations={REF_NAME: tag}))
    (path / "index.json").write_bytes(dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}))
    return path


def read_layout(path: Path, tag: str) -> tuple[bytes, dict[str, bytes]]:
    """The manifest bytes tagged ``tag`` in a layout and every blob the layout holds (digest → bytes)."""
    index = json.loads((path / "index.json").read_bytes())
    entry = next(m for m in index["manifests"] if m.get("annotations", {}).get(REF_NAME) == tag)
    blobs = {}
    for algorithm in os.listdir(path / "blobs"):
        for name in os.listdir(path / "blobs" / algorithm):
            blobs[f"{algorithm}:{name}"] = (path / "blobs" / algorithm / name).read_bytes()
    return blobs[entry["digest"]], blobs
