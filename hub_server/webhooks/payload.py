"""What a webhook receives: the JSON body for an audited push, tag or delete, and its signature.

An audit event becomes at most one webhook event:

* ``push``   — a manifest was pushed into a repository for the first time (``tag`` is the tag
  it was pushed with, if any);
* ``tag``    — a tag was created or moved (``previousDigest`` is the digest it named before,
  ``null`` for a new tag); re-pushing a tag to the digest it already names sends nothing;
* ``delete`` — a manifest left a repository (``tags`` lists the tags that went with it), or
  only a tag was removed (``digest`` is the manifest it named, which stays).

The body is compact JSON with sorted keys; it is stored and re-sent byte for byte on retries.
The signature header is ``sha256=`` + the hex HMAC-SHA256 of those exact bytes keyed with the
webhook's secret (docs/webhooks.md shows how to verify it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from hub_server.audit import AuditEvent

__all__ = ["EVENTS", "SIGNATURE_HEADER", "body_bytes", "event_fields", "signature"]

EVENTS = ("push", "tag", "delete")
SIGNATURE_HEADER = "X-Forkd-Signature-256"


def event_fields(event: AuditEvent) -> tuple[str, dict[str, Any]] | None:
    """The webhook event type and its fields for an audit event, or None when it sends nothing."""
    if event.action not in EVENTS or not event.repository or "/" not in event.repository:
        return None
    detail = json.loads(event.detail or "{}")
    namespace = event.repository.split("/", 1)[0]
    fields: dict[str, Any] = {
        "namespace": namespace,
        "repository": event.repository,
        "actor": event.actor,
        "timestamp": event.at.isoformat().replace("+00:00", "Z"),
    }
    if event.action == "push":
        reference = event.reference or ""
        fields.update(
            tag=None if ":" in reference else reference or None,  # a digest reference has a colon
            digest=event.digest,
        )
    elif event.action == "tag":
        previous = detail.get("previous")
        if previous == event.digest:
            return None
        fields.update(tag=event.reference, digest=event.digest, previousDigest=previous)
    else:
        tags = [t for t in (event.reference or "").split(",") if t]
        if event.digest is None:
            fields.update(tags=tags, digest=detail.get("tagDigest"), manifestRemoved=False)
        else:
            fields.update(tags=tags, digest=event.digest, manifestRemoved=True)
    return event.action, fields


def body_bytes(delivery_id: str, event_type: str, fields: dict[str, Any]) -> bytes:
    """The exact body sent: ``{"delivery": …, "event": …, **fields}`` as compact sorted JSON."""
    return json.dumps(
        {"delivery": delivery_id, "event": event_type, **fields}, sort_keys=True, separators=(",", ":")
    ).encode()


def signature(secret: str, body: bytes) -> str:
    """The ``X-Forkd-Signature-256`` value: ``sha256=<hex HMAC-SHA256 of body keyed with secret>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
