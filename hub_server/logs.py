"""Structured logging: one JSON object per line, and one access-log line per request.

:func:`configure_logging` installs a :class:`JSONFormatter` on the root logger (``ts``,
``level``, ``logger``, ``msg``, then any ``extra={...}`` fields, then ``exc`` for a
traceback), or a :class:`HumanFormatter` when the log goes to a terminal. :func:`access_log_middleware` logs each HTTP request once, on the
``hub_server.access`` logger, with ``method``, ``path``, ``route``, ``status``,
``duration_ms``, ``bytes_in``, ``bytes_out``, ``remote``, ``user`` and ``request_id``.

The request id is the client's ``X-Request-ID`` when it is a sane token (≤ 128 characters
of ``[A-Za-z0-9._:-]``), otherwise a fresh one; it is echoed in the response's
``X-Request-ID`` and left in ``scope["state"]["request_id"]`` for handlers. ``user`` is the
``name`` of ``scope["state"]["principal"]`` if the app put a principal there.

Litestar's default ``logging_config`` runs ``dictConfig`` on the root logger when the app is
created, replacing this handler: build the app with ``logging_config=None`` when using
:func:`configure_logging`.

Installation and what each placement sees: as for ``hub_server.metrics`` (per route via
``Litestar(middleware=[access_log_middleware])``, or wrapping the whole app to also log
requests that match no route).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from datetime import UTC, datetime
from typing import IO, Any

from hub_server.metrics import ASGIApp, Exchange, Receive, Scope, Send, route_template

__all__ = ["ACCESS_LOGGER", "HumanFormatter", "JSONFormatter", "access_log_middleware", "configure_logging"]

ACCESS_LOGGER = "hub_server.access"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """Formats a record as one JSON object; values JSON cannot encode become ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


class HumanFormatter(logging.Formatter):
    """One readable line per record, for a person at a terminal: time, level, message, then
    the ``extra={...}`` fields as ``key=value`` (and a traceback, if any, below)."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).astimezone().strftime("%H:%M:%S")  # local time for a terminal
        extras = [
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in _STANDARD_ATTRS and not k.startswith("_") and k != "color_message" and v is not None
        ]
        line = f"{when} {record.levelname:<7} {record.getMessage()}"
        if extras and record.name == ACCESS_LOGGER:
            line += "  " + " ".join(extras[-3:])  # the request line already says method, path, status
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _one_line_header_warnings(record: logging.LogRecord) -> bool:
    """urllib3's "Failed to parse headers" is a warning about a response it still used (an object store's
    stray bytes under load, seen with SeaweedFS): one line, not a traceback (issue 28: no traceback for an
    expected event)."""
    if record.name == "urllib3.connection" and str(record.msg).startswith("Failed to parse headers"):
        record.exc_info, record.exc_text = None, None
    return True


def configure_logging(level: str = "INFO", stream: IO[str] = sys.stderr, *, human: bool | None = None) -> None:
    """Send every log record at ``level`` or above to ``stream``: JSON lines, or readable lines
    (:class:`HumanFormatter`) when ``human`` (default: when ``stream`` is a terminal).

    Idempotent: calling it again replaces the handler it installed before (other handlers,
    such as pytest's, are left alone).

    Raises:
        ValueError: ``level`` is not a logging level name (DEBUG, INFO, WARNING, ERROR, CRITICAL).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_forkd_hub", False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(HumanFormatter() if (_is_terminal(stream) if human is None else human) else JSONFormatter())
    handler.addFilter(_one_line_header_warnings)
    handler._forkd_hub = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(numeric)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _request_id(scope: Scope) -> str:
    incoming = _header(scope, b"x-request-id")
    if incoming is not None and _REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


def _user(scope: Scope) -> str | None:
    state = scope.get("state")
    principal = state.get("principal") if isinstance(state, dict) else None
    return getattr(principal, "name", None)


def _path(scope: Scope) -> str:
    # raw_path is the full path as sent (mounted apps see only their remainder in "path").
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else scope.get("path", "")


def access_log_middleware(app: ASGIApp, logger: logging.Logger | None = None) -> ASGIApp:
    """Wrap ``app`` so every HTTP request is logged once and carries an ``X-Request-ID``.

    Usable directly in ``Litestar(middleware=[access_log_middleware])``. Requests that end
    in 5xx (or an exception) log at ERROR, the rest at INFO. Non-HTTP scopes pass through.
    """
    log = logger or logging.getLogger(ACCESS_LOGGER)

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        request_id = _request_id(scope)
        state = scope.setdefault("state", {})
        if isinstance(state, dict):
            state["request_id"] = request_id
        exchange = Exchange(receive, send, extra_headers=[(b"x-request-id", request_id.encode("ascii"))])
        failed = False
        try:
            await app(scope, exchange.receive, exchange.send)
        except BaseException:
            failed = True
            raise
        finally:
            status = exchange.final_status(failed)
            client = scope.get("client")
            method = scope.get("method", "")
            path = _path(scope)
            log.log(
                logging.ERROR if status >= 500 else logging.INFO,
                "%s %s %s",
                method,
                path,
                status,
                extra={
                    "method": method,
                    "path": path,
                    "route": route_template(scope),
                    "status": status,
                    "duration_ms": round(exchange.seconds * 1000, 3),
                    "bytes_in": exchange.bytes_in,
                    "bytes_out": exchange.bytes_out,
                    "remote": client[0] if client else None,
                    "user": _user(scope),
                    "request_id": request_id,
                },
            )

    return middleware
