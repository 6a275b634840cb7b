"""docs/webhooks.md: every JSON example has exactly the keys the hub sends, the signature example
is right, the verification snippet works, and every setting it lists exists."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hub_server.audit import AuditEvent
from hub_server.settings import Settings, env_name
from hub_server.webhooks.payload import body_bytes, event_fields, signature

DOC = Path(__file__).resolve().parents[3] / "docs" / "webhooks.md"
EXAMPLE = re.compile(r"<!-- json-example: (\w+) -->\s*```json\n(.*?)```", re.S)
D0, D1 = "blake3:" + "0" * 64, "blake3:" + "1" * 64


def examples() -> dict[str, object]:
    found = {name: json.loads(body) for name, body in EXAMPLE.findall(DOC.read_text())}
    assert set(found) == {"push", "tag", "delete", "deliveries"}
    return found


def real(action: str, reference: str | None, digest: str | None, detail: dict) -> dict:
    event = AuditEvent(
        at=datetime.now(UTC),
        actor="ci",
        action=action,
        repository="acme/vm",
        reference=reference,
        digest=digest,
        detail=json.dumps(detail),
    )
    converted = event_fields(event)
    assert converted is not None
    return json.loads(body_bytes("id", *converted))


@pytest.mark.parametrize(
    ("name", "action", "reference", "digest", "detail"),
    [
        ("push", "push", D1, D1, {}),
        ("tag", "tag", "v1", D1, {"previous": D0}),
        ("delete", "delete", "v1", D1, {"cascade": False, "force": False}),
    ],
)
def test_payload_examples_have_the_real_keys(name, action, reference, digest, detail):
    doc = examples()[name]
    sent = real(action, reference, digest, detail)
    assert set(doc) == set(sent)
    assert doc["event"] == sent["event"] == name


def test_the_tag_only_delete_has_the_same_keys():
    assert set(real("delete", "v1", None, {"tagDigest": D1})) == set(examples()["delete"])


def test_the_signature_example_and_the_snippet_verify():
    text = DOC.read_text()
    secret = re.search(r"With the secret `([^`]+)`", text).group(1)
    header = re.search(r"X-Forkd-Signature-256: (sha256=[0-9a-f]{64})", text).group(1)
    body = json.dumps(examples()["tag"], sort_keys=True, separators=(",", ":")).encode()
    assert signature(secret, body) == header
    snippet = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(snippet, scope)  # noqa: S102 - the documented code, run as a receiver would
    assert scope["verify"](secret, body, header)
    assert not scope["verify"](secret, body + b" ", header)
    assert not scope["verify"](secret + "x", body, header)


def test_every_documented_setting_exists():
    documented = set(re.findall(r"`(FORKD_HUB_WEBHOOK_[A-Z_]+)`", DOC.read_text()))
    fields = {env_name(f) for f in Settings.__dataclass_fields__ if f.startswith("webhook_")}
    assert documented == fields
