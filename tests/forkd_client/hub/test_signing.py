"""``push --sign`` / ``pull --verify-key`` against a real in-process hub: a chain pulls only when its head
carries a signature, by a trusted key, made for exactly that digest; otherwise nothing is installed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid, SignatureInvalid
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.hub.referrers import upload_blob
from forkd_client.hub.signing import TrustedKeys, push_signature, verify_head
from forkd_client.store import SnapshotStore
from manifest.signature import (
    EMPTY_CONFIG_BYTES,
    SIGNATURE_ARTIFACT,
    SignatureError,
    fingerprint,
    sign_digest,
    signature_artifact,
)

from ..snapshots import make_link_source
from .hubproxy import proxy

REF = Reference.parse("team/py:v1")


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def client(inproc_hub):
    return inproc_hub.client(inproc_hub.token("ci", "push:team/*"))


def installed(store: SnapshotStore) -> list[str]:
    return sorted(p.name for p in (store.root / "snapshots").iterdir()) if (store.root / "snapshots").is_dir() else []


def test_a_signed_chain_pulls_and_names_its_key(chain3, other_store, client, key):
    pushed = push(chain3, client, "head", REF, sign=key)
    assert pushed.signature is not None
    listed = client.repository("team/py").referrers(pushed.digest, SIGNATURE_ARTIFACT)
    assert [d["digest"] for d in listed] == [pushed.signature]
    pulled = pull(other_store, client, REF, as_tag="py", verify_keys=[key.public_key()])
    assert pulled.signed_by is not None and pulled.signed_by.key == fingerprint(key.public_key())
    assert pulled.to_obj()["signature"] == {"key": fingerprint(key.public_key()), "artifact": pushed.signature}
    assert len(other_store.chain("py")) == 3
    # the head records who signed it (``forkd inspect`` shows it); the links below carry no claim of their own
    assert other_store.get("py").origin["signed_by"] == fingerprint(key.public_key())
    assert other_store.get("py").origin["signature"] == pushed.signature
    assert "signed_by" not in other_store.chain("py")[0].origin


def test_an_unsigned_chain_is_refused_before_anything_is_fetched(chain3, other_store, client, key):
    push(chain3, client, "head", REF)
    before = client.bytes_received
    with pytest.raises(SignatureInvalid, match="is not signed"):
        pull(other_store, client, REF, as_tag="py", verify_keys=[key.public_key()])
    assert installed(other_store) == []
    assert not list((other_store.root / ".staging").glob("*"))  # nothing staged either
    assert client.bytes_received - before < 100_000  # the chain's manifests and configs, no chunk


def test_a_chain_signed_by_another_key_is_refused(chain3, other_store, client, key):
    push(chain3, client, "head", REF, sign=Ed25519PrivateKey.generate())
    with pytest.raises(SignatureInvalid, match="which is not a trusted key"):
        pull(other_store, client, REF, as_tag="py", verify_keys=[key.public_key()])
    assert installed(other_store) == []


def test_a_changed_layer_pushed_over_the_signed_tag_is_refused(chain3, other_store, client, key, tmp_path):
    """Someone with push rights but not the key replaces the head: its new digest has no signature."""
    push(chain3, client, "head", REF, sign=key)
    evil = make_link_source(tmp_path / "evil", chain3.path("mid") / "memory.bin", seed=99)
    chain3.import_snapshot(evil, "evil", parent="mid")
    push(chain3, client, "evil", REF)
    with pytest.raises(SignatureInvalid, match="is not signed"):
        pull(other_store, client, REF, as_tag="py", verify_keys=[key.public_key()])
    assert installed(other_store) == []


def test_a_signature_moved_onto_another_head_never_verifies(chain3, other_store, client, key, tmp_path):
    """The referrer link is forged: a genuine envelope (signing chain A) in an artifact whose subject is B."""
    a = push(chain3, client, "head", Reference.parse("team/py:a"), sign=key)
    other = make_link_source(tmp_path / "other", chain3.path("mid") / "memory.bin", seed=7)
    chain3.import_snapshot(other, "other", parent="mid")
    b = push(chain3, client, "other", Reference.parse("team/py:b"))
    envelope = sign_digest(key, a.digest, "team/py")
    head_b, _ = client.repository("team/py").get_manifest(b.digest)
    forged = signature_artifact(envelope, fingerprint(key.public_key()), b.digest, len(head_b))
    location = client.upload_chunk(client.repository("team/py").start_upload(), envelope, 0)
    if not client.repository("team/py").blob_exists(forged.envelope_digest):
        client.finish_upload(location, forged.envelope_digest)
    client.repository("team/py").put_manifest(forged.digest, forged.manifest)
    with pytest.raises(SignatureInvalid, match=f"the signature is for team/py@{a.digest}, not team/py@{b.digest}"):
        pull(other_store, client, Reference.parse("team/py:b"), as_tag="b", verify_keys=[key.public_key()])
    assert installed(other_store) == []


def test_a_tampered_signature_is_refused(chain3, other_store, client, key):
    pushed = push(chain3, client, "head", REF)
    doc = json.loads(sign_digest(key, pushed.digest, "team/py"))
    raw = bytearray(base64.b64decode(doc["signature"]))
    raw[10] ^= 0x40
    doc["signature"] = base64.b64encode(bytes(raw)).decode()
    envelope = json.dumps(doc).encode()
    head, _ = client.repository("team/py").get_manifest(pushed.digest)
    artifact = signature_artifact(envelope, fingerprint(key.public_key()), pushed.digest, len(head))
    client.finish_upload(
        client.upload_chunk(client.repository("team/py").start_upload(), envelope, 0), artifact.envelope_digest
    )
    location = client.upload_chunk(client.repository("team/py").start_upload(), b"{}", 0)
    client.finish_upload(location, "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
    client.repository("team/py").put_manifest(artifact.digest, artifact.manifest)
    with pytest.raises(SignatureInvalid, match="does not verify"):
        verify_head(client.repository("team/py"), pushed.digest, [key.public_key()])
    with pytest.raises(SignatureInvalid):
        pull(other_store, client, REF, as_tag="py", verify_keys=[key.public_key()])
    assert installed(other_store) == []


def test_a_tampered_layer_blob_on_the_hub_installs_nothing(chain3, other_store, client, key, tmp_path):
    """The head's vmstate blob is corrupted in the hub's store: the pull fails on it, and with
    --verify-key the base and middle links (already fetched and checked) are not installed either."""
    pushed = push(chain3, client, "head", REF, sign=key)
    head, _ = client.repository("team/py").get_manifest(pushed.digest)
    vmstate = json.loads(head)["layers"]
    digest = next(
        layer["digest"] for layer in vmstate if layer["mediaType"].startswith("application/vnd.forkd.vmstate")
    )
    algorithm, hexdigest = digest.split(":")
    path = tmp_path / "hub" / "blobs" / "blobs" / algorithm / hexdigest[:2] / hexdigest
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DigestInvalid):
        pull(other_store, client, REF, as_tag="py", verify_keys=[key.public_key()])
    assert installed(other_store) == []
    # without verification the pull installs base links as they pass (the behaviour --verify-key changes)
    with pytest.raises(DigestInvalid):
        pull(other_store, client, REF, as_tag="py")
    assert installed(other_store) != []


def test_trusted_keys_per_namespace_from_the_client_config(tmp_path: Path, key):
    config = tmp_path / "cfg" / "forkd" / "trusted-keys.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"namespaces": {"team": ["keys/team.pub"], "*": ["/etc/release.pub"]}}))
    trusted = TrustedKeys(config)
    assert trusted.for_namespace("team") == [config.parent / "keys/team.pub", Path("/etc/release.pub")]
    assert trusted.for_namespace("other") == [Path("/etc/release.pub")]
    assert TrustedKeys(tmp_path / "missing.json").for_namespace("team") == []
    config.write_text('{"namespaces": {"team": "keys/team.pub"}}')
    with pytest.raises(SignatureError, match="namespace 'team' must list key file paths"):
        trusted.for_namespace("team")
    config.write_text("[" * 100_000 + "]" * 100_000)  # nesting the parser cannot follow: a clear error
    with pytest.raises(SignatureError, match="unreadable trusted-keys file"):
        trusted.for_namespace("team")


def test_a_hub_that_lists_another_heads_signature_as_a_referrer_is_refused(
    chain3, other_store, inproc_hub, key, tmp_path
):
    """The referrer link is the hub's word: a hostile hub answers the referrers of B with A's genuine
    signature artifact. The artifact's own subject (A) gives it away."""
    client = inproc_hub.client(inproc_hub.token("ci", "push:team/*"))
    a = push(chain3, client, "head", Reference.parse("team/py:a"), sign=key)
    other = make_link_source(tmp_path / "other", chain3.path("mid") / "memory.bin", seed=7)
    chain3.import_snapshot(other, "other", parent="mid")
    b = push(chain3, client, "other", Reference.parse("team/py:b"))
    listing = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": client.repository("team/py").referrers(a.digest),
        }
    ).encode()  # A's genuine referrers
    assert a.signature in listing.decode()

    def tamper(request: httpx.Request):
        if request.url.path == f"/v2/team/py/referrers/{b.digest}":
            return httpx.Response(
                200, content=listing, headers={"Content-Type": "application/vnd.oci.image.index.v1+json"}
            )
        return None

    hostile = HubClient("http://hub.test", client.token, http=proxy(inproc_hub, tamper))
    with pytest.raises(SignatureInvalid, match=f"the artifact's subject is {a.digest}, not {b.digest}"):
        pull(other_store, hostile, Reference.parse("team/py:b"), as_tag="b", verify_keys=[key.public_key()])
    assert installed(other_store) == []


def test_junk_referrers_do_not_hide_a_genuine_signature(chain3, other_store, client, key):
    """Anyone with push rights may add referrers; those naming a trusted key are checked first."""
    pushed = push(chain3, client, "head", REF)
    junk = Ed25519PrivateKey.generate()
    for i in range(40):
        envelope = sign_digest(junk, pushed.digest, f"team/junk{i}")
        head, _ = client.repository("team/py").get_manifest(pushed.digest)
        artifact = signature_artifact(envelope, fingerprint(junk.public_key()), pushed.digest, len(head))
        client.finish_upload(
            client.upload_chunk(client.repository("team/py").start_upload(), envelope, 0), artifact.envelope_digest
        )
        if i == 0:
            client.finish_upload(
                client.upload_chunk(client.repository("team/py").start_upload(), b"{}", 0),
                "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
            )
        client.repository("team/py").put_manifest(artifact.digest, artifact.manifest)
    genuine = push_signature(client.repository("team/py"), pushed.digest, key)  # the newest, behind 40 junk ones
    assert verify_head(client.repository("team/py"), pushed.digest, [key.public_key()]).artifact == genuine


def test_fake_signatures_claiming_the_trusted_key_do_not_hide_the_genuine_one(chain3, other_store, client, key):
    """Issue 27, item 4: 33 referrers claiming the trusted key's fingerprint (signed by another key) listed
    before the genuine signature made a client that examined 32 candidates refuse the pull."""
    pushed = push(chain3, client, "head", REF)
    repo = client.repository("team/py")
    head, _ = repo.get_manifest(pushed.digest)
    stranger = Ed25519PrivateKey.generate()
    upload_blob(repo, EMPTY_CONFIG_BYTES)
    for i in range(33):
        envelope = sign_digest(stranger, pushed.digest, f"team/fake{i}")
        fake = signature_artifact(envelope, fingerprint(key.public_key()), pushed.digest, len(head))
        upload_blob(repo, envelope)
        repo.put_manifest(fake.digest, fake.manifest)
    genuine = push_signature(repo, pushed.digest, key)  # the newest: listed after all 33
    assert verify_head(repo, pushed.digest, [key.public_key()]).artifact == genuine
