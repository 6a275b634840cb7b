"""The one exception mapper: every error becomes the ``{"errors": [...]}`` envelope.

``HubError`` carries its code; a client disconnecting mid-body is logged at INFO (a normal
event); auth errors, Litestar's routing/validation/size errors and
outages are translated here; anything else is a bug: logged with its traceback and
answered as ``INTERNAL`` without details.

An outage of a dependency — the database unreachable (``DatabaseUnavailable``), the blob store unreachable or
full (``StorageUnavailable``, ``StorageFull``) — is 503 ``UNAVAILABLE`` with ``detail.dependency`` naming it
(``database`` or ``storage``; ``detail.reason`` ``unreachable`` or ``full``) and ``Retry-After``: a client
retries it. It is reported to the process's ``Outages`` (one log line per change of state, no traceback).
Failed requests on upload routes are counted by code (``forkd_hub_upload_failures_total``).
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from hub_server.api.deps import ClientDisconnected
from hub_server.api.token import TOKEN_PATH, token_realm
from hub_server.auth.credentials import bearer_challenge
from hub_server.auth.errors import Forbidden, Unauthorized
from hub_server.db.outage import DatabaseUnavailable
from hub_server.errors import ErrorCode, HubError
from hub_server.outages import DATABASE, STORAGE, Outages
from hub_server.storage import StorageFull, StorageUnavailable

__all__ = ["EXCEPTION_HANDLERS", "RETRY_AFTER", "to_hub_error", "unavailable"]

log = logging.getLogger("hub_server.api")

_BY_STATUS = {
    400: ErrorCode.INVALID_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.DENIED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.TOO_LARGE,
    416: ErrorCode.RANGE_INVALID,
    503: ErrorCode.UNAVAILABLE,
}


def to_hub_error(exc: Exception, request: Request[Any, Any, Any] | None = None) -> HubError:
    """The wire error for any exception (logging the unexpected ones)."""
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, ClientDisconnected):  # nobody reads the answer; the access log shows a 400
        log.info("%s", exc)
        return HubError(ErrorCode.INVALID_REQUEST, "the client disconnected before the end of the request body")
    if isinstance(exc, Unauthorized):
        return HubError(
            ErrorCode.UNAUTHORIZED,
            str(exc),
            {"reason": exc.reason},
            headers={"WWW-Authenticate": _challenge(exc, request)},
        )
    if isinstance(exc, Forbidden):
        headers = {"WWW-Authenticate": _challenge(exc, request)} if exc.scope else {}
        return HubError(
            ErrorCode.DENIED, str(exc), {"action": exc.action, "repository": exc.repository}, headers=headers
        )
    if isinstance(exc, DatabaseUnavailable):
        _report(request, DATABASE, exc.reason)
        return unavailable(DATABASE, "unreachable", "the database is unavailable; retry later")
    if isinstance(exc, StorageFull):
        _report(request, STORAGE, str(exc))
        return unavailable(STORAGE, "full", "the blob store is full; retry later (an operator must free space)")
    if isinstance(exc, StorageUnavailable):
        _report(request, STORAGE, str(exc))
        return unavailable(STORAGE, "unreachable", "the blob store is unavailable; retry later")
    if isinstance(exc, NotFoundException | MethodNotAllowedException | RequestEntityTooLarge) or (
        isinstance(exc, HTTPException) and exc.status_code < 500
    ):
        code = _BY_STATUS.get(exc.status_code, ErrorCode.INVALID_REQUEST)
        detail: dict[str, Any] = {}
        extra = getattr(exc, "extra", None)
        if extra:
            detail["problems"] = extra
        headers = {k: v for k, v in (exc.headers or {}).items() if k.lower() == "allow"}
        message = exc.detail if code is ErrorCode.INVALID_REQUEST else None
        return HubError(code, message, detail, headers=headers)
    where = f"{request.method} {request.url.path}" if request is not None else "?"
    log.error("unhandled error in %s", where, exc_info=exc)
    return HubError(ErrorCode.INTERNAL)


#: Seconds a client is asked to wait before retrying a request refused for an outage.
RETRY_AFTER = 5


def unavailable(dependency: str, reason: str, message: str) -> HubError:
    """The 503 of an outage of ``dependency`` (``database``/``storage``)."""
    return HubError(
        ErrorCode.UNAVAILABLE,
        message,
        {"dependency": dependency, "reason": reason},
        headers={"Retry-After": str(RETRY_AFTER)},
    )


def _outages(request: Request[Any, Any, Any] | None) -> Outages | None:
    registry = getattr(request.app.state, "registry", None) if request is not None else None
    ctx = getattr(registry, "ctx", None)
    return getattr(ctx, "outages", None)


def _report(request: Request[Any, Any, Any] | None, dependency: str, reason: str) -> None:
    outages = _outages(request)
    if outages is not None:
        outages.failed(dependency, reason)
    else:  # outside an app (tests of the mapper): still one line, no traceback
        log.warning("%s unavailable: %s", dependency, reason)


def _count_upload_failure(request: Request[Any, Any, Any], error: HubError) -> None:
    if "/blobs/uploads" not in (request.scope.get("path_template") or request.url.path):
        return
    registry = getattr(request.app.state, "registry", None)
    metrics = getattr(getattr(registry, "ctx", None), "metrics", None)
    if metrics is not None:
        metrics.upload_failures.labels(code=str(error.code)).inc()


def _challenge(exc: Unauthorized | Forbidden, request: Request[Any, Any, Any] | None) -> str:
    """The Docker token-auth challenge: where to get a token, and for which scope."""
    realm, service = token_realm(request) if request is not None else (TOKEN_PATH, "forkd-hub")
    if isinstance(exc, Forbidden) or exc.reason == "insufficient_scope":
        error: str | None = "insufficient_scope"
    else:
        error = "invalid_token" if exc.reason in ("unknown", "revoked", "expired") else None
    return bearer_challenge(realm, service, exc.scope, error)


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    error = to_hub_error(exc, request)
    _count_upload_failure(request, error)
    return Response(error.to_wire(), status_code=error.status, headers=error.headers, media_type="application/json")


EXCEPTION_HANDLERS = {Exception: handle_exception}
