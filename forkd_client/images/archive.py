"""A ``docker-archive:FILE`` (``docker save``, ``skopeo copy … docker-archive:``) as a fetched image.

The archive's ``manifest.json`` must describe exactly one image. Its config is hashed (and checked against
its file name when that is ``<64 hex>.json`` or ``blobs/sha256/<hex>``); an archive has no manifest, so
its config digest (docker's image ID) stands in as the manifest digest. Each layer member is copied to the
work directory; its sha256 is compared with the config's ``rootfs.diff_ids`` entry right away when the
member is a plain tar, and while it is applied when it is compressed (:mod:`.apply` hashes the
decompressed stream). Links between members (``docker save`` links identical layers) are followed inside
the archive only.

Errors: :class:`ImageNotFound` (no such file), :class:`MalformedImage`, :class:`UnsupportedImage` (several
images in one archive), :class:`ImageDigestMismatch`, :class:`LimitExceeded`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .apply import LayerInput
from .errors import ImageDigestMismatch, ImageNotFound, LimitExceeded, MalformedImage, UnsupportedImage
from .fetch import FetchedImage
from .limits import ImageLimits
from .manifests import check_platform, parse_config
from .progress import Progress, no_progress
from .reference import DockerArchiveRef
from .tarstream import DECODE_ERRORS, compression_of

_HEX_NAME = re.compile(r"(?:blobs/sha256/)?([0-9a-f]{64})(?:\.json)?")
_CHUNK = 1 << 20


def fetch_archive(
    ref: DockerArchiveRef, workdir: Path, *, limits: ImageLimits, progress: Progress = no_progress
) -> FetchedImage:
    """Read and verify the archive's single image; its layers are copied into ``workdir``."""
    if not ref.path.is_file():
        raise ImageNotFound(f"{ref}: no such file")
    try:
        with tarfile.open(ref.path, "r:*") as tar:
            return _read(ref, tar, workdir, limits, progress)
    except DECODE_ERRORS as e:
        raise MalformedImage(f"{ref}: not a readable tar archive ({e})") from None


def _member(ref: DockerArchiveRef, tar: tarfile.TarFile, name: str) -> IO[bytes]:
    try:
        f = tar.extractfile(name)
    except KeyError:
        f = None
    if f is None:
        raise MalformedImage(f"{ref}: the archive has no file {name!r}")
    return f


def _small(ref: DockerArchiveRef, tar: tarfile.TarFile, name: str, limit: int, limit_name: str) -> bytes:
    with _member(ref, tar, name) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise LimitExceeded(f"{ref}: {name} is larger than {limit} bytes", limit=limit_name)
    return data


def _read(
    ref: DockerArchiveRef, tar: tarfile.TarFile, workdir: Path, limits: ImageLimits, progress: Progress
) -> FetchedImage:
    try:
        images: Any = json.loads(_small(ref, tar, "manifest.json", limits.max_manifest_bytes, "max_manifest_bytes"))
    except ValueError:
        raise MalformedImage(f"{ref}: manifest.json is not JSON") from None
    if not isinstance(images, list) or not images or not all(isinstance(i, dict) for i in images):
        raise MalformedImage(f"{ref}: manifest.json is not a list of images")
    if len(images) != 1:
        tags = ", ".join(t for i in images for t in (i.get("RepoTags") or [])) or "untagged"
        raise UnsupportedImage(f"{ref}: the archive holds {len(images)} images ({tags}); save one image per archive")
    image = images[0]
    config_name, layer_names = image.get("Config"), image.get("Layers")
    if (
        not isinstance(config_name, str)
        or not isinstance(layer_names, list)
        or not all(isinstance(n, str) for n in layer_names)
    ):
        raise MalformedImage(f"{ref}: manifest.json needs Config and Layers")
    if len(layer_names) > limits.max_layers:
        raise LimitExceeded(f"{ref}: {len(layer_names)} layers", limit="max_layers")
    config_bytes = _small(ref, tar, config_name, limits.max_config_bytes, "max_config_bytes")
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    named = _HEX_NAME.fullmatch(config_name)
    if named and "sha256:" + named.group(1) != config_digest:
        raise ImageDigestMismatch(f"{ref}: config {config_name}", "sha256:" + named.group(1), config_digest)
    config = parse_config(config_bytes, f"{ref}: config")
    check_platform(config, str(ref))
    if len(config.diff_ids) != len(layer_names):
        raise MalformedImage(f"{ref}: the config lists {len(config.diff_ids)} diff_ids for {len(layer_names)} layers")
    sizes = []
    for name in layer_names:
        try:
            sizes.append(tar.getmember(name).size)
        except KeyError:
            raise MalformedImage(f"{ref}: the archive has no layer {name!r}") from None
    total, done = sum(sizes), 0
    layers = []
    for index, (name, diff_id) in enumerate(zip(layer_names, config.diff_ids, strict=True)):
        path = workdir / f"layer-{index}"
        base = done

        def report(n: int, base: int = base) -> None:
            progress("download", base + n, total)

        raw_digest = _copy(ref, tar, name, path, limits, report)
        done += path.stat().st_size
        with open(path, "rb") as f:
            plain = compression_of(f.read(4)) == "none"
        if plain and raw_digest != diff_id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise ImageDigestMismatch(f"{ref}: layer {name}", diff_id, raw_digest)
        layers.append(LayerInput(path, raw_digest, diff_id))
    return FetchedImage(ref.name, config_digest, None, config_digest, config, layers)


def _copy(
    ref: DockerArchiveRef,
    tar: tarfile.TarFile,
    name: str,
    path: Path,
    limits: ImageLimits,
    report: Callable[[int], None],
) -> str:
    """Copy member ``name`` to the new file ``path``; returns its sha256 digest."""
    sha = hashlib.sha256()
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out, _member(ref, tar, name) as f:
            while chunk := f.read(_CHUNK):
                written += len(chunk)
                if written > limits.max_blob_bytes:
                    raise LimitExceeded(
                        f"{ref}: layer {name} is larger than {limits.max_blob_bytes} bytes", limit="max_blob_bytes"
                    )
                sha.update(chunk)
                out.write(chunk)
                report(written)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    return "sha256:" + sha.hexdigest()
