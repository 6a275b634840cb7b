"""skopeo and OCI image layouts: the peer's client and the way it stores a chain (one full image per link)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from common import SKOPEO_BLOB_CACHE

from manifest.digest import digest_file


def skopeo_clear_cache() -> None:
    """skopeo remembers blobs it saw per registry; a fresh transfer must not use that knowledge."""
    SKOPEO_BLOB_CACHE.unlink(missing_ok=True)


def skopeo_copy(src: str, dst: str) -> None:
    """``skopeo copy`` keeping uncompressed layers as they are (baselines.md §1); plain HTTP to registries."""
    cmd = ["skopeo", "copy", "--quiet", "--preserve-digests"]
    cmd += ["--src-tls-verify=false"] if src.startswith("docker://") else []
    cmd += ["--dest-tls-verify=false"] if dst.startswith("docker://") else ["--dest-oci-accept-uncompressed-layers"]
    result = subprocess.run([*cmd, src, dst], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} {src} {dst} failed: {result.stderr.strip()}")


def sha256_file(path: Path) -> str:
    """Lowercase hex sha256 of a file (OCI names blobs by it)."""
    return digest_file(path, ("sha256",))["sha256"].hex


def write_oci_layout(
    layout: Path,
    tag: str,
    layer_files: Sequence[Path],
    annotations: dict[str, str] | None = None,
    digests: dict[Path, str] | None = None,
) -> dict[Path, str]:
    """An OCI image layout holding one image whose layers are ``layer_files`` as they are
    (uncompressed, media type ``…layer.v1.tar`` as in baselines.md §1), blobs hard-linked (or
    copied across filesystems). Returns the sha256 of every layer file (reusing ``digests``)."""
    digests = dict(digests or {})
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    layers = []
    for f in layer_files:
        d = digests.get(f) or sha256_file(f)
        digests[f] = d
        target = blobs / d
        if not target.exists():
            try:
                os.link(f, target)
            except OSError:
                shutil.copyfile(f, target)
        layers.append(
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{d}", "size": f.stat().st_size}
        )
    diff_ids = [layer["digest"] for layer in layers]
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}, "config": {}}
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _write_blob(blobs, config, "application/vnd.oci.image.config.v1+json"),
            "layers": layers,
            **({"annotations": annotations} if annotations else {}),
        }
    ).encode()
    mdesc = _write_blob(blobs, manifest, "application/vnd.oci.image.manifest.v1+json")
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    index["manifests"] = [
        m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
    ]
    index["manifests"].append({**mdesc, "annotations": {"org.opencontainers.image.ref.name": tag}})
    index_path.write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return digests


def _write_blob(blobs: Path, data: bytes, media_type: str) -> dict:
    d = hashlib.sha256(data).hexdigest()
    (blobs / d).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{d}", "size": len(data)}
