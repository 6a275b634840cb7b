"""The error responses every API operation documents in the OpenAPI schema, from the one error
table (``hub_server.errors.ERRORS``): for each status an operation can answer, the envelope
schema and the codes that status carries. ``document_errors(app)`` adds them to every route
under ``/v2`` and ``/api/`` (the web catalog's HTML pages are not in the schema).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar
from litestar.openapi.datastructures import ResponseSpec

from hub_server.errors import ERRORS

__all__ = ["ErrorEnvelope", "ErrorItem", "document_errors", "error_responses"]

_ALWAYS = (400, 401, 403, 404, 500, 503)
_WITH_BODY = (413,)
_API_PREFIXES = ("/v2", "/api/", "/registry.json", "/packs/")


@dataclass
class ErrorItem:
    code: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ErrorEnvelope:
    """Every error answer: ``{"errors": [{"code", "message", "detail"}]}`` (docs/http-api.md, "Errors")."""

    errors: list[ErrorItem]


def error_responses(methods: set[str]) -> dict[int, ResponseSpec]:
    """The documented error responses of an operation answering ``methods``."""
    statuses = list(_ALWAYS) + ([*_WITH_BODY] if methods & {"PUT", "POST", "PATCH"} else [])
    statuses += [416] if "GET" in methods else []
    out = {}
    for status in sorted(statuses):
        codes = sorted(str(code) for code, spec in ERRORS.items() if spec.status == status)
        out[status] = ResponseSpec(
            data_container=ErrorEnvelope,
            generate_examples=False,
            description=f"The error envelope, with code {' or '.join(codes)}",
        )
    return out


def document_errors(app: Litestar) -> None:
    """Add the error responses to every API route handler of ``app`` (before the schema is built)."""
    for route in app.routes:
        if not route.path.startswith(_API_PREFIXES):
            continue
        for handler in getattr(route, "route_handlers", ()):
            if handler.include_in_schema is False:
                continue
            handler.responses = {**error_responses(set(handler.http_methods)), **(handler.responses or {})}
