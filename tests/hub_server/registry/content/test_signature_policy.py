"""A namespace whose tags move only onto manifests signed by a registered key (FORKD_HUB_SIGNATURE_POLICY)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hub_server.registry.content.signature_policy import SignaturePolicy, SignaturePolicyError
from hub_server.settings import load_settings
from manifest import mediatypes as mt
from manifest.signature import (
    EMPTY_CONFIG,
    EMPTY_CONFIG_BYTES,
    fingerprint,
    public_key_pem,
    sign_digest,
    signature_artifact,
)
from tests.e2e.hubproc import forkd_hub
from tests.e2e.logscan import assert_no_traceback
from tests.hub_server.pushing import BuiltLayer, PushClient, expect_error


def write_policy(root: Path, **namespaces: list[Ed25519PrivateKey]) -> Path:
    (root / "keys").mkdir(parents=True, exist_ok=True)
    doc: dict = {"namespaces": {}}
    for namespace, keys in namespaces.items():
        paths = []
        for i, key in enumerate(keys):
            (root / "keys" / f"{namespace}-{i}.pub").write_bytes(public_key_pem(key))
            paths.append(f"keys/{namespace}-{i}.pub")
        doc["namespaces"][namespace] = {"keys": paths}
    (root / "policy.json").write_text(json.dumps(doc))
    return root / "policy.json"


def push_untagged(pusher: PushClient, repo: str, images, workdir: Path) -> BuiltLayer:
    layers: list[BuiltLayer] = []
    for i, (memory, vmstate) in enumerate(images[:2]):
        layer = pusher.build_layer(repo, memory, vmstate, workdir / f"link{i}", layers[-1] if layers else None)
        pusher.push_layer(repo, layer)
        layers.append(layer)
    return layers[-1]


def push_signature(
    pusher: PushClient,
    repo: str,
    head: BuiltLayer,
    key: Ed25519PrivateKey,
    signed_repo: str | None = None,
    signed_digest: str | None = None,
) -> str:
    envelope = sign_digest(key, signed_digest or head.digest, signed_repo or repo)
    artifact = signature_artifact(envelope, fingerprint(key.public_key()), head.digest, len(head.manifest))
    pusher.ensure_blob(repo, EMPTY_CONFIG_BYTES, EMPTY_CONFIG["digest"])
    pusher.ensure_blob(repo, envelope, artifact.envelope_digest)
    pusher.put_manifest(repo, artifact.digest, artifact.manifest)
    return artifact.digest


def tag(pusher: PushClient, repo: str, name: str, head: BuiltLayer) -> httpx.Response:
    return pusher.http.put(
        f"/v2/{repo}/manifests/{name}",
        content=head.manifest,
        headers={**pusher.headers, "Content-Type": mt.OCI_MANIFEST},
    )


@pytest.fixture
def keys() -> tuple[Ed25519PrivateKey, Ed25519PrivateKey]:
    return Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()


def test_an_unsigned_tag_push_is_refused_and_a_signed_one_accepted(make_hub, images, tmp_path, keys):
    team_key, _ = keys
    hub = make_hub(signature_policy=write_policy(tmp_path / "policy", team=[team_key]))
    pusher = hub.pusher(hub.token("ci", "push:team/*", "push:acme/*"))
    head = push_untagged(pusher, "team/py", images, tmp_path / "w")  # by digest: always accepted
    detail = expect_error(tag(pusher, "team/py", "v1", head), 403, "SIGNATURE_REQUIRED")
    assert detail["digest"] == head.digest and detail["keys"] == [fingerprint(team_key.public_key())]
    assert pusher.http.head("/v2/team/py/manifests/v1", headers=pusher.headers).status_code == 404

    push_signature(pusher, "team/py", head, team_key)
    r = tag(pusher, "team/py", "v1", head)
    assert r.status_code == 201, r.text

    # a namespace the policy does not list is not affected
    other = push_untagged(pusher, "acme/py", images, tmp_path / "w2")
    assert tag(pusher, "acme/py", "v1", other).status_code == 201


@pytest.mark.parametrize("case", ["unregistered key", "another repository", "another digest"])
def test_signatures_that_do_not_fit_are_refused(make_hub, images, tmp_path, keys, case):
    team_key, stranger = keys
    hub = make_hub(signature_policy=write_policy(tmp_path / "policy", team=[team_key]))
    pusher = hub.pusher(hub.token("ci", "push:team/*"))
    head = push_untagged(pusher, "team/py", images, tmp_path / "w")
    if case == "unregistered key":
        push_signature(pusher, "team/py", head, stranger)
        reason = "which is not a trusted key"
    elif case == "another repository":
        push_signature(pusher, "team/py", head, team_key, signed_repo="team/other")
        reason = "the signature is for team/other@"
    else:
        push_signature(pusher, "team/py", head, team_key, signed_digest="sha256:" + "0" * 64)
        reason = "the signature is for team/py@sha256:0000"
    detail = expect_error(tag(pusher, "team/py", "v1", head), 403, "SIGNATURE_REQUIRED")
    assert len(detail["refused"]) == 1 and reason in detail["refused"][0]


def test_the_policy_file_is_checked_at_start(tmp_path, keys):
    path = write_policy(tmp_path, team=[keys[0]])
    assert SignaturePolicy.load(path).describe() == {"team": [fingerprint(keys[0].public_key())]}
    assert load_settings(env={"FORKD_HUB_SIGNATURE_POLICY": str(path)}).signature_policy == path
    for body, message in [
        ("{}", "KeyError"),
        ('{"namespaces": {"team": {"keys": []}}}', "non-empty list"),
        ('{"namespaces": {"team": {"keys": ["missing.pub"]}}}', "missing.pub"),
    ]:
        path.write_text(body)
        with pytest.raises(SignaturePolicyError, match=message):
            SignaturePolicy.load(path)
    (tmp_path / "keys" / "team-0.pub").write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    path.write_text('{"namespaces": {"team": {"keys": ["keys/team-0.pub"]}}}')
    with pytest.raises(SignaturePolicyError, match="is a private key"):
        SignaturePolicy.load(path)


@pytest.mark.e2e  # runs forkd-hub as a process (tests/tiers.py)
def test_an_unusable_policy_stops_the_hub_with_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("not json")
    env = {
        **os.environ,
        "FORKD_HUB_DATA_DIR": str(tmp_path / "data"),
        "FORKD_HUB_SIGNATURE_POLICY": str(tmp_path / "bad.json"),
    }
    result = subprocess.run(
        forkd_hub("serve", "--port", "0"), env=env, check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "FORKD_HUB_SIGNATURE_POLICY" in result.stderr and "bad.json" in result.stderr
    assert_no_traceback(result.stdout + result.stderr, "forkd-hub serve")


def test_fake_signatures_claiming_the_key_do_not_crowd_out_the_genuine_one(make_hub, images, tmp_path, keys):
    """Issue 27, item 4: 33 referrers pushed after the genuine signature, each claiming the registered key's
    fingerprint (signed by another key), made a check that looked at 32 candidates refuse the tag."""
    team_key, stranger = keys
    hub = make_hub(signature_policy=write_policy(tmp_path / "policy", team=[team_key]))
    pusher = hub.pusher(hub.token("ci", "push:team/*"))
    head = push_untagged(pusher, "team/py", images, tmp_path / "w")
    push_signature(pusher, "team/py", head, team_key)
    claimed = fingerprint(team_key.public_key())
    for i in range(33):
        envelope = sign_digest(stranger, head.digest, f"team/fake{i}")
        fake = signature_artifact(envelope, claimed, head.digest, len(head.manifest))
        pusher.ensure_blob("team/py", envelope, fake.envelope_digest)
        pusher.put_manifest("team/py", fake.digest, fake.manifest)
    r = tag(pusher, "team/py", "v1", head)
    assert r.status_code == 201, r.text
