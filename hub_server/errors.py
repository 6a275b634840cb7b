"""The hub's wire error vocabulary: one table, one exception type.

Every error a client can see is a row of :data:`ERRORS` (code → HTTP status and a default
message) and travels as ``{"errors": [{"code", "message", "detail"}]}`` (docs/http-api.md,
"Errors"). Registry code raises :class:`HubError`; ``hub_server.api.errors`` is the one place
that turns it (and auth, routing, validation and unexpected errors) into a response, so no
handler ever builds error JSON.

Codes follow OCI distribution where one fits. ``INTERNAL`` never carries details to the
client: they are logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["ERRORS", "ErrorCode", "ErrorSpec", "HubError"]


class ErrorCode(StrEnum):
    BLOB_UNKNOWN = "BLOB_UNKNOWN"
    BLOB_UPLOAD_INVALID = "BLOB_UPLOAD_INVALID"
    BLOB_UPLOAD_UNKNOWN = "BLOB_UPLOAD_UNKNOWN"
    BLOB_UPLOAD_BUSY = "BLOB_UPLOAD_BUSY"
    DIGEST_INVALID = "DIGEST_INVALID"
    MANIFEST_BLOB_UNKNOWN = "MANIFEST_BLOB_UNKNOWN"
    MANIFEST_INVALID = "MANIFEST_INVALID"
    MANIFEST_UNKNOWN = "MANIFEST_UNKNOWN"
    PARENT_UNKNOWN = "PARENT_UNKNOWN"
    CHAIN_TOO_DEEP = "CHAIN_TOO_DEEP"
    NAME_INVALID = "NAME_INVALID"
    NAME_UNKNOWN = "NAME_UNKNOWN"
    SIZE_INVALID = "SIZE_INVALID"
    TOO_LARGE = "TOO_LARGE"
    RANGE_INVALID = "RANGE_INVALID"
    UNAUTHORIZED = "UNAUTHORIZED"
    DENIED = "DENIED"
    HAS_DEPENDENTS = "HAS_DEPENDENTS"
    TAG_CONFLICT = "TAG_CONFLICT"
    TAG_IMMUTABLE = "TAG_IMMUTABLE"
    SIGNATURE_REQUIRED = "SIGNATURE_REQUIRED"
    INVENTORY_STALE = "INVENTORY_STALE"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    TOOMANYREQUESTS = "TOOMANYREQUESTS"
    UNSUPPORTED = "UNSUPPORTED"
    INVALID_REQUEST = "INVALID_REQUEST"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


@dataclass(frozen=True)
class ErrorSpec:
    status: int
    message: str


#: The table docs/http-api.md documents: code → (HTTP status, default message).
ERRORS: dict[ErrorCode, ErrorSpec] = {
    ErrorCode.BLOB_UNKNOWN: ErrorSpec(404, "blob unknown to this repository"),
    ErrorCode.BLOB_UPLOAD_INVALID: ErrorSpec(400, "blob upload invalid"),
    ErrorCode.BLOB_UPLOAD_UNKNOWN: ErrorSpec(404, "blob upload unknown (or expired)"),
    ErrorCode.BLOB_UPLOAD_BUSY: ErrorSpec(409, "another request is writing this upload; retry after Retry-After"),
    ErrorCode.DIGEST_INVALID: ErrorSpec(400, "content does not match its digest"),
    ErrorCode.MANIFEST_BLOB_UNKNOWN: ErrorSpec(400, "manifest references blobs the repository does not hold"),
    ErrorCode.MANIFEST_INVALID: ErrorSpec(400, "manifest invalid"),
    ErrorCode.MANIFEST_UNKNOWN: ErrorSpec(404, "manifest unknown"),
    ErrorCode.PARENT_UNKNOWN: ErrorSpec(400, "parent manifest unknown"),
    ErrorCode.CHAIN_TOO_DEEP: ErrorSpec(400, "parent chain is longer than the limit"),
    ErrorCode.NAME_INVALID: ErrorSpec(400, "invalid repository name or tag"),
    ErrorCode.NAME_UNKNOWN: ErrorSpec(404, "repository name not known to registry"),
    ErrorCode.SIZE_INVALID: ErrorSpec(400, "provided length did not match content length"),
    ErrorCode.TOO_LARGE: ErrorSpec(413, "request is over its size limit"),
    ErrorCode.RANGE_INVALID: ErrorSpec(416, "requested range not satisfiable"),
    ErrorCode.UNAUTHORIZED: ErrorSpec(401, "authentication required"),
    ErrorCode.DENIED: ErrorSpec(403, "requested access to the resource is denied"),
    ErrorCode.HAS_DEPENDENTS: ErrorSpec(409, "other manifests chain on this one"),
    ErrorCode.TAG_CONFLICT: ErrorSpec(409, "the tag no longer points where the push expected"),
    ErrorCode.TAG_IMMUTABLE: ErrorSpec(409, "the tag is immutable and points at another digest"),
    ErrorCode.SIGNATURE_REQUIRED: ErrorSpec(
        403, "the namespace requires a signature by a registered key before a tag moves"
    ),
    ErrorCode.INVENTORY_STALE: ErrorSpec(
        409, "the inventory report builds on a generation the hub does not hold; send a full report"
    ),
    ErrorCode.QUOTA_EXCEEDED: ErrorSpec(403, "the namespace is over one of its quotas"),
    ErrorCode.TOOMANYREQUESTS: ErrorSpec(429, "too many requests; retry after the time given"),
    ErrorCode.UNSUPPORTED: ErrorSpec(400, "the operation is unsupported"),
    ErrorCode.INVALID_REQUEST: ErrorSpec(400, "malformed request"),
    ErrorCode.NOT_FOUND: ErrorSpec(404, "no such route"),
    ErrorCode.METHOD_NOT_ALLOWED: ErrorSpec(405, "method not allowed on this route"),
    ErrorCode.UNAVAILABLE: ErrorSpec(503, "a backing service is unavailable; retry later"),
    ErrorCode.INTERNAL: ErrorSpec(500, "internal server error"),
}


class HubError(Exception):
    """An error with a wire code. ``detail`` is JSON-serialisable and shown to the client.

    ``headers`` are extra response headers (e.g. the current ``Range`` of an upload on 416).
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str | None = None,
        detail: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.code = ErrorCode(code)
        self.message = message or ERRORS[self.code].message
        self.detail: dict[str, Any] = detail or {}
        self.headers: dict[str, str] = headers or {}
        super().__init__(f"{self.code}: {self.message}")

    @property
    def status(self) -> int:
        return ERRORS[self.code].status

    def to_wire(self) -> dict[str, Any]:
        """The error envelope's body."""
        return {"errors": [{"code": str(self.code), "message": self.message, "detail": self.detail}]}
