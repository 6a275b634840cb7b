"""Signature payloads and envelopes: a signature verifies exactly the digest and repository it was made for."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from manifest.signature import (
    SIGNATURE_ARTIFACT,
    SignatureError,
    canonical_payload,
    envelope_digest_of,
    fingerprint,
    sign_digest,
    signature_artifact,
    verify_envelope,
)

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def test_the_payload_is_canonical_and_names_digest_and_repository():
    assert canonical_payload(A, "team/py") == (
        b'{"digest":"' + A.encode() + b'","repository":"team/py","type":"dev.forkd.signature.v1"}'
    )


def test_a_signature_verifies_for_its_digest_and_repository(key):
    envelope = sign_digest(key, A, "team/py")
    assert verify_envelope(envelope, A, "team/py", [key.public_key()]) == fingerprint(key.public_key())


@pytest.mark.parametrize(("digest", "repository"), [(B, "team/py"), (A, "team/other"), (A, "evil/py")])
def test_a_signature_for_one_digest_never_verifies_another(key, digest, repository):
    envelope = sign_digest(key, A, "team/py")
    with pytest.raises(SignatureError, match="the signature is for team/py@sha256:aaaa"):
        verify_envelope(envelope, digest, repository, [key.public_key()])


def test_rewriting_the_payload_to_name_another_digest_breaks_the_signature(key):
    doc = json.loads(sign_digest(key, A, "team/py"))
    doc["payload"] = base64.b64encode(canonical_payload(B, "team/py")).decode()
    with pytest.raises(SignatureError, match="does not verify"):
        verify_envelope(json.dumps(doc).encode(), B, "team/py", [key.public_key()])


def test_an_untrusted_key_is_named(key):
    other = Ed25519PrivateKey.generate()
    envelope = sign_digest(key, A, "team/py")
    with pytest.raises(SignatureError, match=f"signed by key {fingerprint(key.public_key())}, which is not a trusted"):
        verify_envelope(envelope, A, "team/py", [other.public_key()])


def test_a_flipped_signature_byte_does_not_verify(key):
    doc = json.loads(sign_digest(key, A, "team/py"))
    raw = bytearray(base64.b64decode(doc["signature"]))
    raw[0] ^= 1
    doc["signature"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(SignatureError, match="does not verify"):
        verify_envelope(json.dumps(doc).encode(), A, "team/py", [key.public_key()])


@pytest.mark.parametrize("envelope", [b"", b"[]", b'{"payload": "%%%", "signature": ""}', b"x" * 70_000])
def test_malformed_envelopes_are_typed_errors(key, envelope):
    with pytest.raises(SignatureError):
        verify_envelope(envelope, A, "team/py", [key.public_key()])


def test_the_artifact_is_a_referrer_of_its_subject(key):
    envelope = sign_digest(key, A, "team/py")
    artifact = signature_artifact(envelope, fingerprint(key.public_key()), A, 1234)
    doc = json.loads(artifact.manifest)
    assert doc["artifactType"] == SIGNATURE_ARTIFACT
    assert doc["subject"] == {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": A, "size": 1234}
    assert doc["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert envelope_digest_of(artifact.manifest, A) == artifact.envelope_digest
    with pytest.raises(SignatureError, match="subject is sha256:aaaa"):  # a referrer link moved to another digest
        envelope_digest_of(artifact.manifest, B)
