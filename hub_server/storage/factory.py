"""``create_store``: the one place that turns a configuration string into a backend.

A spec is a backend name followed by ``param=value`` words, split with shell rules
(quote values that contain spaces)::

    memory
    filesystem root=/var/lib/forkd-hub/blobs
    filesystem root="/srv/hub data/blobs"
    s3 bucket=snapshots endpoint=http://127.0.0.1:8333 region=us-east-1

Adding a backend is one entry in ``BACKENDS`` (see docs/storage-backends.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .base import BlobStore

__all__ = ["BACKENDS", "Backend", "create_store", "describe_backends"]


@dataclass(frozen=True)
class Backend:
    """How to build one backend from its spec parameters (already checked against ``params``)."""

    build: Callable[[Mapping[str, str]], BlobStore]
    params: Mapping[str, str] = field(default_factory=dict)
    """Accepted parameter names → one-line help."""
    required: frozenset[str] = frozenset()


def _filesystem(params: Mapping[str, str]) -> BlobStore:
    from .filesystem import FilesystemStore

    root = Path(params["root"]).expanduser()
    if not root.is_absolute():
        raise ValueError(f"filesystem root must be an absolute path, got {params['root']!r}")
    return FilesystemStore(root)


def _s3(params: Mapping[str, str]) -> BlobStore:
    from .s3 import S3Config, S3Store

    return S3Store(S3Config.from_params(params))


def _memory(params: Mapping[str, str]) -> BlobStore:
    from .memory import MemoryStore

    return MemoryStore()


BACKENDS: dict[str, Backend] = {
    "filesystem": Backend(
        _filesystem,
        params={"root": "absolute directory holding the blobs (created if missing)"},
        required=frozenset({"root"}),
    ),
    "memory": Backend(_memory),
    "s3": Backend(
        _s3,
        params={
            "bucket": "the bucket (must exist)",
            "endpoint": "S3 endpoint URL (default: AWS for the region)",
            "region": "region name, e.g. us-east-1",
            "prefix": "key prefix inside the bucket (default: none)",
            "public_endpoint": "endpoint presigned redirect URLs use, when clients reach S3 by another name",
            "part_size": "multipart part size, 5MiB-5GiB (default 16MiB)",
            "pool": "HTTP connections to S3 (default 64)",
        },
        required=frozenset({"bucket"}),
    ),
}


def create_store(spec: str) -> BlobStore:
    """Build the blob store described by ``spec`` (``"<backend> [param=value ...]"``).

    Raises:
        ValueError: empty or unparsable spec, unknown backend, unknown / repeated / missing
            parameter, or a bad parameter value; the message names the culprit and lists
            what is valid.
        StorageUnavailable: the backend was configured correctly but cannot start (for
            example, a filesystem root that cannot be created).
    """
    try:
        words = shlex.split(spec)
    except ValueError as exc:
        raise ValueError(f"cannot parse storage spec {spec!r}: {exc}") from None
    if not words:
        raise ValueError(f"empty storage spec; expected one of: {describe_backends()}")
    name, *assignments = words
    backend = BACKENDS.get(name)
    if backend is None:
        raise ValueError(f"unknown storage backend {name!r}; valid backends: {describe_backends()}")
    params: dict[str, str] = {}
    valid = ", ".join(sorted(backend.params)) or "none"
    for word in assignments:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"storage spec parameter {word!r} for {name!r} is not of the form name=value")
        if key not in backend.params:
            raise ValueError(f"unknown parameter {key!r} for storage backend {name!r}; valid parameters: {valid}")
        if key in params:
            raise ValueError(f"parameter {key!r} given twice in storage spec {spec!r}")
        params[key] = value
    missing = sorted(backend.required - params.keys())
    if missing:
        raise ValueError(f"storage backend {name!r} needs parameter(s) {', '.join(missing)}")
    return backend.build(params)


def describe_backends() -> str:
    """One line listing every backend and its parameters, for error messages and ``--help``."""
    return "; ".join(
        name + "".join(f" {p}=..." for p in sorted(backend.params)) for name, backend in sorted(BACKENDS.items())
    )
