"""Signing a pushed chain and verifying a chain before it is pulled (docs/ci-publishing.md).

``push --sign KEY``: once every link is on the hub by digest and before the tag moves,
:func:`push_signature` uploads the envelope (:func:`manifest.signature.sign_digest`) and the empty
config, and PUTs the signature artifact by digest: an OCI referrer of the head, so a hub that
requires signatures finds it when the tag moves, and OCI copies can carry it along.

``pull --verify-key PUB`` (and the trusted keys of :class:`TrustedKeys`): :func:`verify_head` asks
the hub for the referrers of the head of artifactType ``application/vnd.forkd.signature.v1+json``,
fetches each (manifest and envelope verified against their digests), checks that its ``subject`` is
the head and that the envelope signs exactly that digest and repository with a trusted key. Any
failure raises before a single chunk is fetched.

Trusted keys per namespace live in ``$XDG_CONFIG_HOME/forkd/trusted-keys.json``::

    {"namespaces": {"team": ["keys/team-ci.pub"], "*": ["/etc/forkd/release.pub"]}}

Paths are relative to that directory; ``"*"`` applies to every namespace. A pull of a namespace
with trusted keys is verified even without ``--verify-key``.

Errors: SignatureInvalid (unsigned or wrongly signed), HubError family, SignatureError (a key file
is unusable; a ValueError), OSError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from manifest.jsontext import loads as loads_json

from .credentials import config_dir
from .errors import DigestInvalid, NotFound, SignatureInvalid

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    from .repository import RepositoryClient

# manifest.signature (and cryptography, ~20 ms) is imported by the functions that sign or verify:
# every pull asks keys_for_pull, and a pull with no trusted keys needs neither.

__all__ = ["TrustedKeys", "Verified", "keys_for_pull", "load_keys", "push_signature", "verify_head"]

TRUSTED_KEYS_FILE = "trusted-keys.json"
#: Signature referrers examined per check: far above what a hub lets one subject hold
#: (FORKD_HUB_REFERRERS_PER_SUBJECT, 128 by default), so junk referrers claiming a trusted key cannot
#: crowd a genuine signature out (issue 27, item 4); still a bound on what a hostile hub costs us.
MAX_CANDIDATES = 1024


def push_signature(repo: RepositoryClient, digest: str, key: Ed25519PrivateKey) -> str:
    """Sign ``digest`` (a manifest already in ``repo``) and push the signature as its referrer;
    return the signature artifact's digest. Raises HubError family."""
    from manifest.signature import EMPTY_CONFIG_BYTES, fingerprint, sign_digest, signature_artifact

    from .referrers import upload_blob

    head, _ = repo.get_manifest(digest)
    media_type = _media_type(head)
    envelope = sign_digest(key, digest, repo.name)
    artifact = signature_artifact(envelope, fingerprint(key.public_key()), digest, len(head), media_type)
    for blob in (EMPTY_CONFIG_BYTES, envelope):  # the artifact names them by their sha256 digests
        upload_blob(repo, blob)
    if not repo.manifest_exists(artifact.digest):
        repo.put_manifest(artifact.digest, artifact.manifest)
    return artifact.digest


def _media_type(manifest: bytes) -> str:
    try:
        return str(loads_json(manifest).get("mediaType") or "application/vnd.oci.image.manifest.v1+json")
    except (ValueError, AttributeError):  # JSONTooDeep is a ValueError too
        return "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Verified:
    """Which key signed the head, by which signature artifact."""

    key: str
    artifact: str

    def to_obj(self) -> dict[str, str]:
        return {"key": self.key, "artifact": self.artifact}


def verify_head(repo: RepositoryClient, digest: str, keys: list[Ed25519PublicKey]) -> Verified:
    """Check that the hub holds a signature of ``digest`` in ``repo`` by one of ``keys``.

    Raises:
        SignatureInvalid: there is no signature referrer, or none verifies (the message says why
            for each one: another subject, another digest or repository, an untrusted key, a
            signature that does not match, bytes that do not match their digest).
        HubError: the hub could not be asked.
    """
    from manifest.signature import (
        ANNOTATION_KEY,
        MAX_ENVELOPE_BYTES,
        SIGNATURE_ARTIFACT,
        SignatureError,
        envelope_digest_of,
        fingerprint,
        verify_envelope,
    )

    if not keys:
        raise ValueError("verify_head needs at least one trusted key")
    try:
        found = repo.referrers(digest, SIGNATURE_ARTIFACT)
    except NotFound:
        found = []
    # Those naming a trusted key first: junk referrers anyone with push rights can add must not
    # push a genuine signature past the candidates this looks at.
    trusted_ids = {fingerprint(k) for k in keys}
    found = sorted(found, key=lambda d: (d.get("annotations") or {}).get(ANNOTATION_KEY) not in trusted_ids)
    reasons: list[str] = []
    for descriptor in found[:MAX_CANDIDATES]:
        artifact = str(descriptor.get("digest", ""))
        if descriptor.get("artifactType") not in (None, SIGNATURE_ARTIFACT):
            continue  # a hub that ignores the filter lists other referrers too
        try:
            manifest, _ = repo.get_manifest(artifact)
            envelope_digest = envelope_digest_of(manifest, digest)
            envelope = repo.get_blob(envelope_digest, limit=MAX_ENVELOPE_BYTES)
            return Verified(verify_envelope(envelope, digest, repo.name, keys), artifact)
        except (SignatureError, DigestInvalid, NotFound) as e:  # this candidate fails; others may verify
            reasons.append(f"{artifact[:19]}…: {e}")
    trusted = ", ".join(fingerprint(k)[:23] + "…" for k in keys)
    if not reasons:
        raise SignatureInvalid(
            f"{repo.name}@{digest} is not signed (no signature referrer on the hub); refusing it (trusted keys: {trusted})"
        )
    raise SignatureInvalid(
        f"{repo.name}@{digest} has no valid signature by a trusted key ({trusted}): " + "; ".join(reasons)
    )


@dataclass
class TrustedKeys:
    """The client config's trusted keys per namespace (``trusted-keys.json``; path injectable)."""

    path: Path = field(default_factory=lambda: config_dir() / TRUSTED_KEYS_FILE)

    def for_namespace(self, namespace: str) -> list[Path]:
        """Key files trusted for ``namespace`` (its own list plus ``"*"``). Raises SignatureError."""
        try:
            doc = loads_json(self.path.read_text())
        except FileNotFoundError:
            return []  # the common case: no trusted keys, and no cryptography to load
        except (OSError, ValueError) as e:
            raise _signature_error(f"{self.path}: unreadable trusted-keys file: {e}") from None
        namespaces = doc.get("namespaces") if isinstance(doc, dict) else None
        if not isinstance(namespaces, dict):
            raise _signature_error(f'{self.path}: want {{"namespaces": {{NAMESPACE: [KEY_FILE, …]}}}}')
        paths: list[Path] = []
        for entry in (namespace, "*"):
            listed = namespaces.get(entry, [])
            if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
                raise _signature_error(f"{self.path}: namespace {entry!r} must list key file paths")
            paths += [self.path.parent / p for p in listed]
        return paths


def _signature_error(message: str) -> Exception:
    """A SignatureError (its module, and cryptography, loaded only to raise one)."""
    from manifest.signature import SignatureError

    return SignatureError(message)


def keys_for_pull(namespace: str, key_files: list[Path] | None = None) -> list[Ed25519PublicKey] | None:
    """The keys a chain of ``namespace`` must be signed by to be pulled or forked: ``key_files``
    (``--verify-key``) plus the namespace's trusted keys (:class:`TrustedKeys`); None when there
    are none. Unreadable key files fail here, before anything is fetched. Raises SignatureError."""
    return load_keys([*(key_files or []), *TrustedKeys().for_namespace(namespace)]) or None


def load_keys(paths: list[Path]) -> list[Ed25519PublicKey]:
    """Public keys from files; a missing file is a SignatureError naming it (not a silent skip)."""
    if not paths:
        return []
    from manifest.signature import SignatureError, load_public_key

    keys = []
    for path in paths:
        try:
            keys.append(load_public_key(path))
        except OSError as e:
            raise SignatureError(f"verify key {path}: {e.strerror or e}") from None
    return keys
