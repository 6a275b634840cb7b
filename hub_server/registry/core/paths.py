"""The storage key layout: the only module that decides which keys exist.

::

    blobs/                          content-addressed objects (verified, immutable)
    └── <algorithm>/                blake3 | sha256 | sha512
        └── <hex[0:2]>/
            └── <hex>               a data blob, chunk map, config, vmstate — or a manifest
                                    (manifests are stored as blobs, exactly as received)
    uploads/
    └── <uuid>                      a resumable upload's staged bytes; moved to blobs/… once
                                    its digest is verified, deleted on cancel/expiry/mismatch
                                    (a recipe upload's staged frames become a pack instead)
    packs/
    └── <id[0:2]>/
        └── <id>                    an immutable pack: verified zstd frames back to back, each
                                    stored once hub-wide (table ``frames``); a data blob pushed as
                                    a recipe has no object of its own, table ``recipe_frames``
                                    lists its frames in order (registry/push/packs.py, recipes.py).
                                    ``<id>`` is 32 lowercase hex (the upload session's uuid).
    forkd-packs/<ns>/<repo>/<alg>-<hex>.forkd-snapshot.tar.zst|.json   forkd pack of manifest <alg>:<hex> and its {sha256, size}, built once (registry/forkd/compat.py)
    healthz/write-probe             a few bytes ``/healthz`` rewrites (at most every few seconds per
                                    process) to prove the store still accepts writes (a full store
                                    reads fine and refuses every write); never referenced, never collected
    quarantine/<key>                an object ``forkd-hub verify --quarantine`` found damaged or
                                    orphaned, moved aside from ``<key>`` (never deleted by the hub;
                                    table ``damage`` says why, registry/upkeep/scrub.py)

Publication is atomic: bytes are staged under ``uploads/`` (or a backend's own staging),
verified against their digest, moved to ``blobs/…``, and only then is metadata committed.
"""

from __future__ import annotations

import re

from manifest.digest import Digest

__all__ = [
    "BLOBS_PREFIX",
    "FORKD_PACKS_PREFIX",
    "FORKD_PACK_SUFFIX",
    "FRAME_PACKS_PREFIX",
    "HEALTH_PROBE_KEY",
    "HEALTH_WRITE_KEY",
    "QUARANTINE_PREFIX",
    "UPLOADS_PREFIX",
    "blob_key",
    "digest_from_blob_key",
    "forkd_pack_info_key",
    "forkd_pack_key",
    "is_pack_key",
    "pack_key",
    "quarantine_key",
    "session_pack_key",
    "upload_key",
]

BLOBS_PREFIX = "blobs"
UPLOADS_PREFIX = "uploads"
FRAME_PACKS_PREFIX = "packs"
QUARANTINE_PREFIX = "quarantine"
FORKD_PACKS_PREFIX = "forkd-packs"
FORKD_PACK_SUFFIX = ".forkd-snapshot.tar.zst"
#: A key the readiness check asks about: its answer (present or not) proves the store responds.
HEALTH_PROBE_KEY = f"{BLOBS_PREFIX}/healthz"
#: The object the readiness check rewrites: a store that refuses it refuses pushes too (full, read-only).
HEALTH_WRITE_KEY = "healthz/write-probe"
_PACK_ID = re.compile(r"[0-9a-f]{32}")


def blob_key(digest: str | Digest) -> str:
    """``blobs/<alg>/<2 hex>/<hex>`` for a digest. Raises InvalidDigest for a malformed one."""
    d = digest if isinstance(digest, Digest) else Digest.parse(digest)
    return f"{BLOBS_PREFIX}/{d.algorithm}/{d.hex[:2]}/{d.hex}"


def digest_from_blob_key(key: str) -> str | None:
    """The digest a ``blobs/…`` key stores, or None if the key is not a well-formed blob key."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != BLOBS_PREFIX or parts[2] != parts[3][:2]:
        return None
    text = f"{parts[1]}:{parts[3]}"
    try:
        Digest.parse(text)
    except ValueError:
        return None
    return text


def upload_key(upload_id: str) -> str:
    """``uploads/<id>``: where an upload session stages its bytes."""
    return f"{UPLOADS_PREFIX}/{upload_id}"


def pack_key(pack_id: str) -> str:
    """``packs/<2 hex>/<id>`` for a 32-hex pack id. Raises ValueError for a malformed id."""
    if not _PACK_ID.fullmatch(pack_id):
        raise ValueError(f"pack id {pack_id[:40]!r} is not 32 lowercase hex digits")
    return f"{FRAME_PACKS_PREFIX}/{pack_id[:2]}/{pack_id}"


def session_pack_key(upload_id: str) -> str:
    """The key of the pack upload session ``upload_id`` (a uuid) becomes. Raises ValueError for an
    id that is not a uuid's hex."""
    return pack_key(upload_id.replace("-", ""))


def is_pack_key(key: str) -> bool:
    """Whether ``key`` is a well-formed ``packs/…`` key."""
    parts = key.split("/")
    return (
        len(parts) == 3
        and parts[0] == FRAME_PACKS_PREFIX
        and bool(_PACK_ID.fullmatch(parts[2]))
        and parts[1] == parts[2][:2]
    )


def quarantine_key(key: str) -> str:
    """``quarantine/<key>``: where ``forkd-hub verify --quarantine`` moves the object at ``key``."""
    return f"{QUARANTINE_PREFIX}/{key}"


def forkd_pack_key(repository: str, digest: str | Digest) -> str:
    """``forkd-packs/<ns>/<repo>/<alg>-<hex>.forkd-snapshot.tar.zst``: the forkd pack of manifest ``digest``.

    Raises InvalidDigest for a malformed digest.
    """
    d = digest if isinstance(digest, Digest) else Digest.parse(digest)
    return f"{FORKD_PACKS_PREFIX}/{repository}/{d.algorithm}-{d.hex}{FORKD_PACK_SUFFIX}"


def forkd_pack_info_key(repository: str, digest: str | Digest) -> str:
    """``…/<alg>-<hex>.json``: ``{"sha256", "size"}`` of that pack, written after it (its presence marks it done)."""
    return forkd_pack_key(repository, digest).removesuffix(FORKD_PACK_SUFFIX) + ".json"
