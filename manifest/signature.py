"""Signatures of snapshot chains: the signed payload, the envelope, the referrer artifact, Ed25519.

What is signed is the digest of a chain's head manifest; that manifest names its config, whose
``parent`` names the parent manifest by digest, and so on down to the base, so one signature
covers every byte of the chain. The signed bytes are a canonical JSON **payload** (keys sorted,
no spaces, ASCII) that names the digest and the repository it was pushed to::

    {"digest":"sha256:…","repository":"team/py","type":"dev.forkd.signature.v1"}

A verifier never trusts the payload it is handed to say what it covers: :func:`verify_envelope`
rebuilds the payload from the digest it expects and compares bytes, so a signature made for one
digest (or repository) never verifies another. The **envelope** (the one layer blob of the
signature artifact) carries the payload, the signature and the key id::

    {"keyid":"sha256:<hex of sha256(raw public key)>","payload":"<base64>","signature":"<base64>"}

The **artifact** is an OCI image manifest with ``artifactType`` :data:`SIGNATURE_ARTIFACT`, the
empty config, that envelope as its only layer and ``subject`` the head's descriptor, so it is a
referrer of the head and travels with OCI copies (docs/decisions/0009-signatures.md).

Keys are Ed25519 (``cryptography``): private keys PKCS#8 PEM, public keys SubjectPublicKeyInfo PEM.

Errors: :class:`SignatureError` (a ManifestError, so a ValueError) naming what did not verify.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from .errors import ManifestError
from .mediatypes import OCI_MANIFEST

SIGNATURE_ARTIFACT = "application/vnd.forkd.signature.v1+json"
"""The ``artifactType`` of a signature referrer, and the media type of its envelope layer."""
PAYLOAD_TYPE = "dev.forkd.signature.v1"
EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
}
EMPTY_CONFIG_BYTES = b"{}"
ANNOTATION_KEY = "dev.forkd.signature.key"
MAX_ENVELOPE_BYTES = 64 << 10

__all__ = [
    "ANNOTATION_KEY",
    "EMPTY_CONFIG",
    "EMPTY_CONFIG_BYTES",
    "MAX_ENVELOPE_BYTES",
    "SIGNATURE_ARTIFACT",
    "SignatureError",
    "SignedArtifact",
    "canonical_payload",
    "envelope_digest_of",
    "fingerprint",
    "load_private_key",
    "load_public_key",
    "public_key_pem",
    "sign_digest",
    "signature_artifact",
    "verify_envelope",
]


class SignatureError(ManifestError):
    """A key, envelope or signature is unusable, or a signature does not verify."""


def canonical_payload(digest: str, repository: str) -> bytes:
    """The exact bytes signed for ``digest`` pushed to ``repository`` (``namespace/repo``)."""
    return json.dumps(
        {"digest": digest, "repository": repository, "type": PAYLOAD_TYPE},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode()


def fingerprint(key: Ed25519PublicKey) -> str:
    """``sha256:<hex>`` of the raw 32-byte public key: the key id in envelopes and displays."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def public_key_pem(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """An unencrypted Ed25519 PKCS#8 PEM private key. Raises SignatureError, OSError."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise SignatureError(f"{path}: not an unencrypted PEM private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"{path}: a {type(key).__name__}, not an Ed25519 private key (make one with forkd keygen)")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key in PEM (SubjectPublicKeyInfo). Raises SignatureError, OSError."""
    data = path.read_bytes()
    if b"PRIVATE KEY" in data:
        raise SignatureError(f"{path} is a private key: give the public key (the .pub file forkd keygen wrote)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise SignatureError(f"{path}: not a PEM public key ({e})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SignatureError(f"{path}: a {type(key).__name__}, not an Ed25519 public key")
    return key


def sign_digest(key: Ed25519PrivateKey, digest: str, repository: str) -> bytes:
    """The envelope (exact bytes of the artifact's layer) signing ``digest`` in ``repository``."""
    payload = canonical_payload(digest, repository)
    envelope = {
        "keyid": fingerprint(key.public_key()),
        "payload": base64.b64encode(payload).decode(),
        "signature": base64.b64encode(key.sign(payload)).decode(),
    }
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class SignedArtifact:
    """A signature referrer ready to push: its manifest bytes and the envelope blob it lists."""

    manifest: bytes
    digest: str
    envelope: bytes
    envelope_digest: str


def signature_artifact(
    envelope: bytes, keyid: str, subject_digest: str, subject_size: int, subject_media_type: str = OCI_MANIFEST
) -> SignedArtifact:
    """The OCI image manifest making ``envelope`` a referrer of the subject manifest."""
    envelope_digest = "sha256:" + hashlib.sha256(envelope).hexdigest()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": SIGNATURE_ARTIFACT,
            "config": EMPTY_CONFIG,
            "layers": [{"mediaType": SIGNATURE_ARTIFACT, "digest": envelope_digest, "size": len(envelope)}],
            "subject": {"mediaType": subject_media_type, "digest": subject_digest, "size": subject_size},
            "annotations": {ANNOTATION_KEY: keyid},
        },
        separators=(",", ":"),
    ).encode()
    return SignedArtifact(manifest, "sha256:" + hashlib.sha256(manifest).hexdigest(), envelope, envelope_digest)


def envelope_digest_of(artifact: bytes, subject_digest: str) -> str:
    """The envelope blob digest a signature artifact lists, after checking that the artifact is one
    of ours and that its ``subject`` is ``subject_digest`` (a referrer link pointing elsewhere is
    refused). Raises SignatureError."""
    try:
        doc = json.loads(artifact)
        subject = doc["subject"]["digest"]
        layers = [layer for layer in doc["layers"] if layer.get("mediaType") == SIGNATURE_ARTIFACT]
        artifact_type = doc.get("artifactType")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SignatureError(f"not a signature artifact: {type(e).__name__}: {e}") from None
    if artifact_type != SIGNATURE_ARTIFACT:
        raise SignatureError(f"artifactType is {artifact_type!r}, not {SIGNATURE_ARTIFACT}")
    if subject != subject_digest:
        raise SignatureError(f"the artifact's subject is {subject}, not {subject_digest}")
    if len(layers) != 1 or not isinstance(layers[0].get("digest"), str):
        raise SignatureError("a signature artifact lists exactly one envelope layer")
    return layers[0]["digest"]


def verify_envelope(envelope: bytes, digest: str, repository: str, keys: list[Ed25519PublicKey]) -> str:
    """Check that ``envelope`` signs exactly ``digest`` in ``repository`` with one of ``keys``;
    return the fingerprint of the key that verified. Raises SignatureError saying why not."""
    if len(envelope) > MAX_ENVELOPE_BYTES:
        raise SignatureError(f"envelope of {len(envelope):,} bytes, over {MAX_ENVELOPE_BYTES:,}")
    try:
        doc: dict[str, Any] = json.loads(envelope)
        payload = base64.b64decode(doc["payload"], validate=True)
        signature = base64.b64decode(doc["signature"], validate=True)
        keyid = str(doc.get("keyid", ""))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SignatureError(f"malformed signature envelope: {type(e).__name__}: {e}") from None
    expected = canonical_payload(digest, repository)
    if payload != expected:
        try:
            named = json.loads(payload)
            what = f"{named.get('repository')}@{named.get('digest')}"
        except (ValueError, AttributeError):
            what = "something else"
        raise SignatureError(f"the signature is for {what}, not {repository}@{digest}")
    candidates = [k for k in keys if fingerprint(k) == keyid] or keys
    for key in candidates:
        try:
            key.verify(signature, payload)
        except InvalidSignature:
            continue
        return fingerprint(key)
    if not any(fingerprint(k) == keyid for k in keys):
        raise SignatureError(f"signed by key {keyid or '(unnamed)'}, which is not a trusted key")
    raise SignatureError(f"the signature by key {keyid} does not verify (tampered)")
