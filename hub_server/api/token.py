"""The token endpoint of Docker token auth: ``GET``/``POST /v2/token`` (docs/http-api.md, "Token endpoint").

OCI clients (skopeo, oras, podman) answer the 401 challenge of ``/v2/`` by calling the realm
it names with their credentials (Basic: any user, the API token as password; or the API
token as bearer) and ``scope=repository:ns/repo:pull,push`` (repeatable). The answer is a
short-lived registry token limited to what the API token allows of those scopes
(``auth.token_scopes``, ``auth.registry_tokens``). Without credentials the answer is the
anonymous token (public repositories only). ``POST`` takes the OAuth2 password grant form.

Bounded by what it may grant (issue 27): more scopes asked for than ``limits.token_scopes`` (or
granted, ``*`` asking for three actions), or a ``POST`` form over :data:`MAX_FORM_BYTES`, is 413
``TOO_LARGE`` before anything is stored, so a registry token never carries more scopes than every
request it authenticates can afford to read.

Errors: 401 ``UNAUTHORIZED`` for bad credentials, 400 ``UNSUPPORTED`` for another grant type,
413 ``TOO_LARGE`` for too many scopes or too large a form.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import QueryParameter

from hub_server.api.deps import read_limited
from hub_server.auth.credentials import Authenticator
from hub_server.auth.registry_tokens import RegistryTokenService
from hub_server.auth.scopes import Principal
from hub_server.auth.token_scopes import grant, parse_token_scopes
from hub_server.errors import ErrorCode, HubError

__all__ = ["TOKEN_PATH", "TokenController", "token_realm"]

TOKEN_PATH = "/v2/token"
#: The largest ``POST`` form read: a hundred scopes take ~6 KiB.
MAX_FORM_BYTES = 64 << 10


def token_realm(request: Request[Any, Any, Any]) -> tuple[str, str]:
    """The absolute URL of the token endpoint and the service name (the hub's ``host:port``).

    From ``--public-url`` when set (behind a proxy), else from the request's own base URL.
    """
    settings = getattr(request.app.state, "settings", None)
    base = (getattr(settings, "public_url", None) or str(request.base_url)).rstrip("/")
    return base + TOKEN_PATH, urlsplit(base).netloc


def _too_many(what: str, count: int, limit: int) -> HubError:
    return HubError(
        ErrorCode.TOO_LARGE,
        f"{count} scopes {what}, over the limit of {limit} per token: ask for fewer (one per repository used)",
        {"limit": limit, "size": count},
    )


async def _answer(state: State, principal: Principal, scopes: list[str]) -> dict[str, Any]:
    service: RegistryTokenService = state.authenticator.registry_tokens
    limit = state.settings.limits.token_scopes
    if sum(len(value.split()) for value in scopes) > limit:  # before anything is parsed or looked up
        raise _too_many("asked for", sum(len(value.split()) for value in scopes), limit)
    granted = grant(principal, parse_token_scopes(scopes))
    if len(granted) > limit:
        raise _too_many("granted", len(granted), limit)
    issued = await service.issue(principal, granted)
    return {
        "token": issued.token,
        "access_token": issued.token,
        "expires_in": issued.expires_in,
        "issued_at": issued.issued_at.isoformat().replace("+00:00", "Z"),
    }


class TokenController(Controller):
    path = TOKEN_PATH
    tags = ["auth"]

    @get("/", summary="Exchange an API token (Basic password or bearer) for a scoped short-lived token")
    async def issue(
        self,
        request: Request[Any, Any, Any],
        state: State,
        scopes: Annotated[list[str] | None, QueryParameter(name="scope")] = None,
        service: Annotated[str | None, QueryParameter()] = None,
    ) -> Response[dict[str, Any]]:
        authenticator: Authenticator = state.authenticator
        principal = await authenticator.api_token_principal(request.headers.get("authorization"))
        request.scope["state"]["principal"] = principal
        return Response(await _answer(state, principal, scopes or []), headers={"Cache-Control": "no-store"})

    @post(
        "/",
        summary="OAuth2 password grant: the same exchange with the API token as password",
        status_code=200,
        request_max_body_size=None,  # bounded by read_limited (413 TOO_LARGE)
    )
    async def issue_oauth2(self, request: Request[Any, Any, Any], state: State) -> Response[dict[str, Any]]:
        body = await read_limited(request, MAX_FORM_BYTES, "token request form")
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        grant_type = (form.get("grant_type") or [""])[0]
        authenticator: Authenticator = state.authenticator
        if grant_type == "password":
            password = (form.get("password") or [""])[0]
            principal = await authenticator.api_token_principal(f"Bearer {password}" if password else None)
        elif grant_type == "refresh_token":
            # The API token stands in as the refresh token (what a client that logged in holds).
            refresh = (form.get("refresh_token") or [""])[0]
            principal = await authenticator.api_token_principal(f"Bearer {refresh}" if refresh else None)
        else:
            raise HubError(
                ErrorCode.UNSUPPORTED,
                f"grant_type {grant_type[:40]!r} is not supported (use password or refresh_token)",
                {"grant_type": grant_type[:40]},
            )
        request.scope["state"]["principal"] = principal
        scopes = [s for value in form.get("scope", []) for s in value.split()]
        return Response(await _answer(state, principal, scopes), headers={"Cache-Control": "no-store"})
