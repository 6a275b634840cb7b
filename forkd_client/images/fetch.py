"""Fetch and verify an image: manifest (through an index to ``linux/amd64``), config, layers.

Two steps, so a build can look in its cache between them: :func:`resolve` reads only manifests (cheap),
:func:`download` then reads the config and streams every layer into a work directory. Nothing is used
before its sha256 is checked: manifests and the config are hashed in memory (they are small and bounded),
layers as they stream to disk, where a blob that does not hash to its digest, or is longer or shorter than
its descriptor says, is deleted and refused. The layers' diff_ids (sha256 of the uncompressed tar) are
checked while they are applied (:mod:`.apply`).

A source is anything with ``name``, ``read_manifest(digest | None, limit)`` and ``open_blob(descriptor)``
(:class:`ImageSource`): an ``oci:`` layout (:mod:`.layout`) or a registry (:mod:`.registry`).
``docker-archive:`` has no manifests; :mod:`.archive` builds its :class:`FetchedImage` itself.

Errors: :class:`ImageDigestMismatch`, :class:`LimitExceeded`, :class:`PlatformNotFound`,
:class:`UnsupportedImage`, :class:`MalformedImage`, and the sources' own (:class:`ImageNotFound`, registry errors).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .apply import LayerInput
from .errors import ImageDigestMismatch, LimitExceeded, MalformedImage, UnsupportedImage
from .limits import ImageLimits
from .manifests import (
    Descriptor,
    ImageConfig,
    Index,
    Manifest,
    check_platform,
    parse_config,
    parse_manifest_or_index,
    select_platform,
)
from .progress import Progress, no_progress

_MAX_INDEX_DEPTH = 2


class ImageSource(Protocol):
    name: str

    def read_manifest(self, digest: str | None, limit: int) -> tuple[bytes, str | None, str | None]: ...

    def open_blob(self, desc: Descriptor) -> contextlib.AbstractContextManager[Iterator[bytes]]: ...


@dataclass(frozen=True)
class ResolvedImage:
    """An image whose manifest is known and verified; ``manifest_digest`` pins its exact content."""

    source: ImageSource
    name: str
    manifest_digest: str
    index_digest: str | None
    manifest: Manifest


@dataclass(frozen=True)
class FetchedImage:
    """A verified image: its config and its layer blobs (files in the work directory), bottom first.
    For a docker-archive, ``manifest_digest`` is the config digest (the image ID): it has no manifest."""

    name: str
    manifest_digest: str
    index_digest: str | None
    config_digest: str
    config: ImageConfig
    layers: list[LayerInput]


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def resolve(source: ImageSource, limits: ImageLimits) -> ResolvedImage:
    """Read and verify the image's manifest, through an index to its linux/amd64 entry."""
    data, media_type, expected = source.read_manifest(None, limits.max_manifest_bytes)
    digest = sha256_digest(data)
    if expected is not None and digest != expected:
        raise ImageDigestMismatch(f"{source.name}: manifest", expected, digest)
    parsed = parse_manifest_or_index(data, f"{source.name}: manifest {digest}", media_type)
    index_digest = None
    for _ in range(_MAX_INDEX_DEPTH):
        if not isinstance(parsed, Index):
            break
        index_digest = index_digest or digest
        chosen = select_platform(parsed, f"{source.name} (index {digest})")
        data, _, _ = source.read_manifest(chosen.digest, limits.max_manifest_bytes)
        digest = sha256_digest(data)
        if digest != chosen.digest or len(data) != chosen.size:
            raise ImageDigestMismatch(
                f"{source.name}: manifest {chosen.digest} ({chosen.size} bytes)",
                chosen.digest,
                f"{digest} ({len(data)} bytes)",
            )
        parsed = parse_manifest_or_index(data, f"{source.name}: manifest {digest}", chosen.media_type)
    if not isinstance(parsed, Manifest):
        raise UnsupportedImage(f"{source.name}: indexes nested more than {_MAX_INDEX_DEPTH} deep")
    if len(parsed.layers) > limits.max_layers:
        raise LimitExceeded(f"{source.name}: {len(parsed.layers)} layers", limit="max_layers")
    return ResolvedImage(source, source.name, digest, index_digest, parsed)


def download(
    image: ResolvedImage, workdir: Path, *, limits: ImageLimits, progress: Progress = no_progress
) -> FetchedImage:
    """Read the config and stream every layer into ``workdir`` (which must exist), each verified."""
    manifest = image.manifest
    what = f"{image.name}: config {manifest.config.digest}"
    if manifest.config.size > limits.max_config_bytes:
        raise LimitExceeded(f"{what} declares {manifest.config.size} bytes", limit="max_config_bytes")
    config_bytes = b"".join(_verified_chunks(image.source, manifest.config, what, manifest.config.size))
    config = parse_config(config_bytes, what)
    check_platform(config, image.name)
    if len(config.diff_ids) != len(manifest.layers):
        raise MalformedImage(f"{what} lists {len(config.diff_ids)} diff_ids for {len(manifest.layers)} layers")
    total = sum(d.size for d in manifest.layers)
    done = 0
    layers = []
    for desc, diff_id in zip(manifest.layers, config.diff_ids, strict=True):
        if desc.size > limits.max_blob_bytes:
            raise LimitExceeded(f"{image.name}: layer {desc.digest} declares {desc.size} bytes", limit="max_blob_bytes")
        path = workdir / desc.digest.replace(":", "-")
        base = done

        def report(n: int, base: int = base) -> None:
            progress("download", base + n, total)

        store_blob(image.source, desc, path, f"{image.name}: layer {desc.digest}", report)
        done += desc.size
        layers.append(LayerInput(path, desc.digest, diff_id))
    return FetchedImage(image.name, image.manifest_digest, image.index_digest, manifest.config.digest, config, layers)


def _verified_chunks(source: ImageSource, desc: Descriptor, what: str, limit: int) -> Iterator[bytes]:
    """The blob's chunks; raises ImageDigestMismatch (after the last chunk, or as soon as it runs long)."""
    sha = hashlib.sha256()
    n = 0
    with source.open_blob(desc) as chunks:
        for chunk in chunks:
            n += len(chunk)
            if n > desc.size or n > limit:
                raise ImageDigestMismatch(what, f"{desc.digest} ({desc.size} bytes)", f"more than {desc.size} bytes")
            sha.update(chunk)
            yield chunk
    actual = "sha256:" + sha.hexdigest()
    if n != desc.size or actual != desc.digest:
        raise ImageDigestMismatch(what, f"{desc.digest} ({desc.size} bytes)", f"{actual} ({n} bytes)")


def store_blob(
    source: ImageSource, desc: Descriptor, path: Path, what: str, report: Callable[[int], None] | None = None
) -> None:
    """Stream the blob into the new file ``path``, verified; on any error the file is removed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            written = 0
            for chunk in _verified_chunks(source, desc, what, desc.size):
                out.write(chunk)
                written += len(chunk)
                if report is not None:
                    report(written)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
