"""Errors from talking to a hub, parsed back from the hub's one error envelope.

    ClientError (forkd_client.errors)
    └── HubError                 the hub answered with an error envelope; ``.code``, ``.status``, ``.detail``
        ├── HubUnreachable       connection refused / DNS / timeout: no answer at all
        ├── NotAHub              the URL answers, but not as a forkd hub does (a plain web server, a wrong path)
        ├── Unauthorized         401: missing, wrong or expired token
        ├── Forbidden            403: the token lacks the scope
        ├── NotFound             404: repository, manifest, blob or upload unknown (or private)
        ├── HasDependents        409: delete refused; ``.dependents`` lists them
        ├── UploadBusy           409: another request works on the upload session now (retry after ``.retry_after``)
        ├── DigestInvalid        (also VerificationFailed) bytes did not match their digest (hub side or on arrival here)
        │   └── SignatureInvalid a chain is unsigned, or not signed for this digest by a trusted key
        ├── SignatureRequired    403: the hub's policy wants a signature before this tag moves
        ├── DiskFull             (also NoSpace, an OSError) the pull cannot fit on the local disk
        └── InvalidReference     (also ValueError) a ``[host/]ns/repo[:tag][@digest]`` string is malformed

httpx errors never leave :mod:`forkd_client.hub.client`; they become these.
"""

from __future__ import annotations

from typing import Any

from ..errors import ClientError, NoSpace, VerificationFailed


class HubError(ClientError):
    """The hub refused a request. ``code`` is the envelope's code (e.g. ``MANIFEST_UNKNOWN``)."""

    def __init__(self, message: str, *, code: str = "UNKNOWN", status: int = 0, detail: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.detail = detail
        self.retry_after: float | None = None
        """Seconds the hub asked to wait before trying again (its ``Retry-After``), if it said."""


#: HTTP answers that mean "something between us and the hub failed", not "the hub refused"
GATEWAY_STATUSES = frozenset({502, 503, 504})


class HubUnreachable(HubError):
    """No answer from the hub (connection refused, DNS failure, timeout)."""


class NotAHub(HubError):
    """``GET /v2/`` at the URL does not answer as a hub does (200, or 401, with ``Docker-Distribution-Api-Version``)."""

    def __init__(self, url: str, what: str) -> None:
        super().__init__(
            f"{url} does not look like a forkd hub ({what}); is this a forkd hub? Give the URL 'forkd-hub serve' "
            "listens on (e.g. http://127.0.0.1:8080, without a path), or the one its operator published",
            code="NOT_A_HUB",
        )
        self.url = url


class Unauthorized(HubError):
    """401: the hub needs a valid token (run ``forkd login`` or set FORKD_TOKEN)."""


class Forbidden(HubError):
    """403: the token is valid but lacks the scope for this operation."""


class NotFound(HubError, LookupError):
    """404: no such repository, tag, digest, blob or upload (or it is private)."""


class HasDependents(HubError):
    """409: other snapshots chain on this one."""

    @property
    def dependents(self) -> list[dict[str, Any]]:
        if isinstance(self.detail, dict):
            return list(self.detail.get("dependents", []))
        return []


class UploadBusy(HubError):
    """409 ``BLOB_UPLOAD_BUSY``: another request (a retry's predecessor on a replica that died, or one still
    running) holds the upload session; its lease runs out within ``retry_after`` seconds."""


class TagConflict(HubError):
    """409: another push moved the tag since this push read it (push again, or ``--force``)."""


class DigestInvalid(HubError, VerificationFailed):
    """Content does not match its digest."""


class SignatureInvalid(DigestInvalid):
    """``pull --verify-key``: no signature referrer of the head verifies for it with a trusted key."""


class SignatureRequired(HubError):
    """403 ``SIGNATURE_REQUIRED``: the namespace requires a signature by a registered key (``push --sign``)."""


class DiskFull(HubError, NoSpace):
    """Not enough free space for what a pull must write (checked before writing anything)."""


class InvalidReference(HubError, ValueError):
    """A reference string does not follow ``[HOST[:PORT]/]namespace/repo[:tag][@digest]``."""
