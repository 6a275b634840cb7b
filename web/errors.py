"""How the catalog answers failures: an HTML page with the API's status code and message.

Expected errors (an unknown or private repository, a bad query, a stale form) are rendered with
``error.html``; anything else goes through the hub's one exception mapper, which the app that mounts
the catalog hands over as ``app.state.error_mapper`` (``hub_server.app``: ``api.errors.to_hub_error``;
the catalog never imports the HTTP API), which logs it, and the page shows only the generic message. The pages also carry security
headers: a Content-Security-Policy that allows only this hub's own scripts, styles and images.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from litestar.datastructures import ResponseHeader
from litestar.exceptions import MethodNotAllowedException, NotFoundException
from litestar.response import Template

from hub_server.auth.errors import Unauthorized
from hub_server.errors import HubError
from web.session import CsrfRejected

__all__ = ["CSP", "HTML_EXCEPTION_HANDLERS", "SECURITY_HEADERS", "ErrorMapper", "browser_aware", "wants_html"]

#: The app's one exception mapper (``app.state.error_mapper``): any exception -> the wire error it is answered as.
ErrorMapper = Callable[[Exception, Request[Any, Any, Any] | None], HubError]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    ResponseHeader(name="Content-Security-Policy", value=CSP),
    ResponseHeader(name="X-Content-Type-Options", value="nosniff"),
    ResponseHeader(name="Referrer-Policy", value="same-origin"),
]

_TITLES = {
    400: "Bad request",
    405: "Not allowed here",
    401: "Sign-in required",
    403: "Not allowed",
    404: "Not found",
    413: "Too large",
    503: "Unavailable",
}


def html_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, NotFoundException):  # no route: an unknown URL, or a static file that is not there
        status, message = 404, f"There is no page at {request.url.path[:200]}."
    elif isinstance(exc, MethodNotAllowedException):
        status, message = 405, f"{request.method} is not how {request.url.path[:200]} is used; follow a link instead."
    elif isinstance(exc, CsrfRejected):
        status, message = 403, str(exc)
    elif isinstance(exc, Unauthorized) and exc.reason == "required" and exc.scope is not None:
        # An anonymous visitor and a repository it may not read, existing or not: the API answers
        # OCI's 401 challenge; a page says "Not found", as for any page a visitor cannot see.
        status, message = 404, "no such page, or it is private: sign in to see private repositories"
    else:
        to_hub_error: ErrorMapper = request.app.state.error_mapper
        error = to_hub_error(exc, request)
        status, message = error.status, error.message
    title = _TITLES.get(status, "Something went wrong")
    return Template(
        template_name="error.html",
        status_code=status,
        context={"title": title, "message": message, "status": status, "principal": None, "path": request.url.path},
        headers={h.name: h.value for h in SECURITY_HEADERS if h.value is not None},
    )


HTML_EXCEPTION_HANDLERS = {Exception: html_error}


def wants_html(request: Request[Any, Any, Any]) -> bool:
    """Whether the caller is a browser: its ``Accept`` prefers HTML to JSON (``*/*`` alone is an API client)."""
    return request.accept.best_match(["application/json", "text/html"], default="application/json") == "text/html"


def browser_aware(
    api_handler: Callable[[Request[Any, Any, Any], Exception], Response[Any]], api_prefixes: tuple[str, ...]
) -> Callable[[Request[Any, Any, Any], Exception], Response[Any]]:
    """The app's exception handler: an unknown URL (or a method a route does not take) outside ``api_prefixes``
    is an HTML page for a browser, the API's error envelope for everyone else."""

    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        if (
            isinstance(exc, NotFoundException | MethodNotAllowedException)
            and not request.url.path.startswith(api_prefixes)
            and wants_html(request)
        ):
            return html_error(request, exc)
        return api_handler(request, exc)

    return handle
