"""Referrer artifacts: small OCI manifests attached to a pushed manifest by its ``subject``.

Provenance (and signatures) travel with a snapshot as referrers of its head manifest: an OCI
image manifest with an ``artifactType``, the empty config, one blob per document and a
``subject`` naming the head, pushed through the hub's plain OCI API (so ``skopeo copy`` and
``oras`` see them) and listed by ``GET /v2/{name}/referrers/{digest}``.

Errors: forkd_client.hub.errors (HubError family; DigestInvalid for a document that does not
match its descriptor).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from manifest.digest import digest_bytes

from .errors import HubError
from .repository import MANIFEST_TYPE, RepositoryClient

__all__ = ["EMPTY_CONFIG", "Document", "fetch_documents", "push_referrer", "upload_blob"]

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
#: the largest referrer document this client reads back (an in-toto statement is a few KiB)
MAX_DOCUMENT_BYTES = 4 << 20


@dataclass(frozen=True)
class Document:
    """One blob of a referrer artifact: its media type and exact bytes."""

    media_type: str
    data: bytes


def upload_blob(repo: RepositoryClient, data: bytes) -> str:
    """Upload the small blob ``data`` to ``repo`` unless the hub holds it; return its sha256 digest.
    Raises the HubError family."""
    digest = str(digest_bytes(data, "sha256"))
    if not repo.blob_exists(digest):
        location = repo.start_upload()
        location = repo.hub.upload_chunk(location, data, 0)
        repo.hub.finish_upload(location, digest)
    return digest


def push_referrer(
    repo: RepositoryClient,
    *,
    subject_digest: str,
    subject_size: int,
    artifact_type: str,
    documents: Sequence[Document],
    annotations: Mapping[str, str],
) -> str:
    """Push an artifact of ``artifact_type`` holding ``documents`` as a referrer of ``subject_digest``
    (an OCI image manifest of ``subject_size`` bytes in ``repo``); return the artifact's digest."""
    config = {
        "mediaType": EMPTY_MEDIA_TYPE,
        "digest": upload_blob(repo, EMPTY_CONFIG),
        "size": len(EMPTY_CONFIG),
    }
    layers = [{"mediaType": d.media_type, "digest": upload_blob(repo, d.data), "size": len(d.data)} for d in documents]
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "artifactType": artifact_type,
        "config": config,
        "layers": layers,
        "subject": {"mediaType": MANIFEST_TYPE, "digest": subject_digest, "size": subject_size},
    }
    if annotations:
        manifest["annotations"] = dict(sorted(annotations.items()))
    data = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    digest = str(digest_bytes(data, "sha256"))
    repo.put_manifest(digest, data, media_type=MANIFEST_TYPE)
    return digest


def fetch_documents(repo: RepositoryClient, digest: str) -> list[Document]:
    """The documents (layers) of the referrer artifact ``digest``, each verified against its digest.

    Raises: HubError (not an image manifest, a document over 4 MiB), DigestInvalid, NotFound.
    """
    data, _ = repo.get_manifest(digest)
    try:
        layers = json.loads(data)["layers"]
        wanted = [(str(layer["mediaType"]), str(layer["digest"]), int(layer["size"])) for layer in layers]
    except (ValueError, KeyError, TypeError) as e:
        raise HubError(f"referrer {repo.name}@{digest} is not an OCI image manifest with layers: {e}") from None
    return [
        Document(media_type, repo.get_blob(blob, size, limit=MAX_DOCUMENT_BYTES)) for media_type, blob, size in wanted
    ]
