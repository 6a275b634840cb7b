"""HTTPS deliveries to a real local TLS receiver (trusted only through FORKD_HUB_WEBHOOK_CA), and the
``delete`` events garbage collection sends (retention expiring a tag, a sweep removing a manifest)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hub_server.settings import SettingsError, load_settings
from tests.hub_server.pushing import auth, check
from tests.hub_server.webhooks.conftest import FAST
from tests.hub_server.webhooks.test_delivery import SECRET, add, log_when, settled


def self_signed(directory: Path, name: str = "hooks.test") -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (and ``name``) made with ``cryptography``: (cert, key) files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_file), str(key_file)


def _push(hub, images, tmp_path, tag: str = "v1"):
    pusher = hub.pusher(hub.token("ci", "push:acme/*"))
    return pusher.push_layer("acme/vm", pusher.build_layer("acme/vm", *images[0], tmp_path / "l0"), tag)


def test_an_https_delivery_reaches_a_receiver_trusted_through_the_ca_setting(make_hub, make_receiver, images, tmp_path):
    cert, key = self_signed(tmp_path)
    receiver = make_receiver(tls=(cert, key))
    assert receiver.url.startswith("https://127.0.0.1:")
    hub = make_hub(**FAST, webhook_ca=Path(cert))
    add(hub, receiver.url, events=["push"])
    _push(hub, images, tmp_path)
    (request,) = receiver.wait_for(1)
    assert request.signed_with(SECRET) and request.json["event"] == "push"
    (row,) = log_when(hub, settled)
    assert row["state"] == "delivered" and row["attempts"][0]["statusCode"] == 200


def test_an_untrusted_certificate_is_a_failed_attempt(make_hub, make_receiver, images, tmp_path):
    receiver = make_receiver(tls=self_signed(tmp_path))
    other_ca, _ = self_signed(tmp_path, "other.test")  # trusted, but not what the receiver presents
    hub = make_hub(**{**FAST, "webhook_attempts": 1}, webhook_ca=Path(other_ca))
    add(hub, receiver.url, events=["push"])
    _push(hub, images, tmp_path)
    (row,) = log_when(hub, settled)
    assert row["state"] == "failed"
    assert "CERTIFICATE_VERIFY_FAILED" in row["attempts"][0]["error"]
    assert receiver.received == []


def test_the_ca_setting_names_a_missing_file(tmp_path):
    with pytest.raises(SettingsError, match="FORKD_HUB_WEBHOOK_CA"):
        load_settings({}, {"FORKD_HUB_WEBHOOK_CA": str(tmp_path / "nope.pem")})


def test_retention_and_gc_send_delete_events(hooked_hub, make_receiver, images, tmp_path):
    admin = hooked_hub.token("admin", "admin")
    pusher = hooked_hub.pusher(admin)
    first = pusher.build_layer("acme/vm", *images[0], tmp_path / "l0")
    other = pusher.build_layer("acme/vm", *images[1], tmp_path / "l1")
    pusher.push_layer("acme/vm", first, "nightly-1")
    pusher.push_layer("acme/vm", other, "nightly-2")
    receiver = make_receiver()
    add(hooked_hub, receiver.url, events=["delete"])
    check(
        hooked_hub.client.patch(
            "/api/v1/repositories/acme/vm", json={"retention": {"keepLast": 1}}, headers=auth(admin)
        ),
        200,
    )
    report = hooked_hub.call(hooked_hub.registry.gc.run, grace=timedelta(0))
    assert [e["tag"] for e in report.retention] == ["nightly-1"] and report.manifests == [first.digest]
    events = sorted((r.json for r in receiver.wait_for(2)), key=lambda e: e["manifestRemoved"])
    untag, swept = events
    assert (untag["tags"], untag["digest"], untag["manifestRemoved"], untag["actor"]) == (
        ["nightly-1"],
        first.digest,
        False,
        "gc",
    )
    assert (swept["tags"], swept["digest"], swept["manifestRemoved"]) == ([], first.digest, True)
    assert all(r.signed_with(SECRET) for r in receiver.received)
