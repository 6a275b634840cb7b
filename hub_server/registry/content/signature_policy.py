"""Namespaces that require signed tags: the hub moves a tag there only onto a manifest that has a
signature referrer made by one of the namespace's registered keys (docs/decisions/0009-signatures.md).

The policy is a JSON file named by ``FORKD_HUB_SIGNATURE_POLICY``, read
once at start::

    {"namespaces": {"team": {"keys": ["keys/team-ci.pub", "/etc/forkd-hub/release.pub"]}}}

Key paths are relative to the file; each is an Ed25519 public key in PEM (``forkd keygen`` writes
one). A tag PUT in a listed namespace is refused with ``SIGNATURE_REQUIRED`` unless a manifest in
the same repository whose subject is the tagged digest, of artifactType
``application/vnd.forkd.signature.v1+json``, holds an envelope that verifies for exactly that digest
and repository (:func:`manifest.signature.verify_envelope`). Pushing by digest is never refused:
that is how the signed manifest and its signature get there before the tag moves.

Errors: :class:`SignaturePolicyError` (a ``ValueError``) for an unusable policy file;
``HubError(SIGNATURE_REQUIRED)`` from :meth:`SignaturePolicy.check_tag`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlmodel import col, select

from hub_server.db.models import Manifest, ManifestSubject, RepositoryManifest
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.paths import blob_key
from hub_server.storage import StorageError
from manifest.signature import (
    ANNOTATION_KEY,
    MAX_ENVELOPE_BYTES,
    SIGNATURE_ARTIFACT,
    SignatureError,
    envelope_digest_of,
    fingerprint,
    load_public_key,
    verify_envelope,
)

__all__ = ["SignatureClaim", "SignaturePolicy", "SignaturePolicyError", "signature_claims"]


class SignaturePolicyError(ValueError):
    """The policy file cannot be used (names the file and what is wrong)."""


@dataclass(frozen=True)
class SignaturePolicy:
    """namespace → the public keys one of which must have signed a manifest before a tag moves to it."""

    keys: dict[str, list[Ed25519PublicKey]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> SignaturePolicy:
        """Read the policy file. Raises SignaturePolicyError."""
        try:
            doc = json.loads(path.read_text())
            namespaces = doc["namespaces"]
            if not isinstance(namespaces, dict):
                raise TypeError("'namespaces' must be an object")
            keys: dict[str, list[Ed25519PublicKey]] = {}
            for namespace, entry in namespaces.items():
                paths = entry["keys"]
                if not isinstance(paths, list) or not paths:
                    raise TypeError(f"namespace {namespace!r}: 'keys' must be a non-empty list of paths")
                keys[namespace] = [load_public_key(path.parent / str(p)) for p in paths]
        except OSError as e:
            raise SignaturePolicyError(f"signature policy {path}: {e.strerror or e}: {e.filename or path}") from None
        except (ValueError, KeyError, TypeError, AttributeError, SignatureError) as e:
            raise SignaturePolicyError(f"signature policy {path}: {type(e).__name__}: {e}") from None
        return cls(keys)

    def describe(self) -> dict[str, list[str]]:
        """namespace → key fingerprints (for logs and docs)."""
        return {ns: [fingerprint(k) for k in keys] for ns, keys in self.keys.items()}

    async def check_tag(
        self, ctx: RegistryContext, repository_id: int | None, namespace: str, name: str, digest: str
    ) -> str | None:
        """Before a tag in ``namespace/name`` moves to ``digest``: the fingerprint of the registered
        key whose signature referrer verifies, or None when the namespace requires none.

        Raises:
            HubError(SIGNATURE_REQUIRED): no referrer of ``digest`` in the repository verifies (the
                detail names the digest, the keys wanted and why each candidate failed).
        """
        keys = self.keys.get(namespace)
        if keys is None:
            return None
        full = f"{namespace}/{name}"
        reasons: list[str] = []
        wanted_ids = {fingerprint(k) for k in keys}
        for artifact in await _signature_referrers(ctx, repository_id, digest, wanted_ids):
            try:
                manifest = await _read_small(ctx, blob_key(artifact))
                envelope = await _read_small(ctx, blob_key(envelope_digest_of(manifest, digest)))
                return verify_envelope(envelope, digest, full, keys)
            except (SignatureError, StorageError, FileNotFoundError) as e:
                reasons.append(f"{artifact}: {e}")
        wanted = [fingerprint(k) for k in keys]
        raise HubError(
            ErrorCode.SIGNATURE_REQUIRED,
            f"namespace {namespace!r} requires a signature by a registered key on {digest} before a tag "
            f"moves to it: {'; '.join(reasons) if reasons else 'it has no signature referrer'} "
            "(push the manifest by digest, then its signature, then the tag: forkd push --sign KEY)",
            {"digest": digest, "keys": wanted, "refused": reasons},
        )


@dataclass(frozen=True)
class SignatureClaim:
    """A signature referrer as the web catalog shows it: the key it names and whether this hub checked it
    (``verified`` is None when the namespace has no registered keys: the hub cannot tell)."""

    artifact: str
    key: str
    verified: bool | None


async def signature_claims(
    ctx: RegistryContext, repository_id: int, namespace: str, name: str, digest: str
) -> list[SignatureClaim]:
    """The signature referrers of ``digest`` in the repository, newest first, each checked against the
    namespace's registered keys when the policy has some. Never raises for a bad artifact (it is
    listed as not verified)."""
    keys = ctx.signatures.keys.get(namespace) if ctx.signatures is not None else None
    claims = []
    for artifact in await _signature_referrers(ctx, repository_id, digest):
        key, verified = "unknown", False if keys else None
        try:
            manifest = await _read_small(ctx, blob_key(artifact))
            key = str(json.loads(manifest).get("annotations", {}).get(ANNOTATION_KEY) or key)
            if keys:
                envelope = await _read_small(ctx, blob_key(envelope_digest_of(manifest, digest)))
                key, verified = verify_envelope(envelope, digest, f"{namespace}/{name}", keys), True
        except (SignatureError, StorageError, FileNotFoundError, ValueError, AttributeError):
            pass
        claims.append(SignatureClaim(artifact, key, verified))
    return claims


async def _read_small(ctx: RegistryContext, key: str) -> bytes:
    """A signature artifact or envelope: small, else refused before it is read."""
    size = (await ctx.store.stat(key)).size
    if size > MAX_ENVELOPE_BYTES:
        raise SignatureError(f"{key}: {size:,} bytes, over the {MAX_ENVELOPE_BYTES:,} a signature may take")
    return await ctx.store.read(key)


async def _signature_referrers(
    ctx: RegistryContext, repository_id: int | None, digest: str, first: set[str] | None = None
) -> list[str]:
    """Digests of the signature artifacts linked to the repository whose subject is ``digest``, newest
    first, those whose annotation names a key in ``first`` before the others: all of them, which is at
    most ``limits.referrers_per_subject`` since a push past that is refused (``push/limits.py``), so
    junk referrers claiming a registered key cannot push a genuine signature out of sight (issue 27,
    item 4) and a check reads a bounded number of rows and blobs."""
    if repository_id is None:
        return []
    async with ctx.sessions() as session:
        rows = await session.exec(
            select(Manifest.digest, Manifest.annotations)
            .join(ManifestSubject, col(ManifestSubject.manifest_digest) == col(Manifest.digest))
            .join(RepositoryManifest, col(RepositoryManifest.manifest_digest) == col(Manifest.digest))
            .where(
                col(RepositoryManifest.repository_id) == repository_id,
                col(ManifestSubject.subject_digest) == digest,
                col(Manifest.artifact_type) == SIGNATURE_ARTIFACT,
            )
            .order_by(col(Manifest.created_at).desc())
            .limit(ctx.limits.referrers_per_subject)
        )
        found = list(rows.all())
    found.sort(key=lambda row: (row[1] or {}).get(ANNOTATION_KEY) not in (first or set()))
    return [row[0] for row in found]
