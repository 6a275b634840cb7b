"""Who is calling: the ``Authorization`` header in every form a client sends, and the challenge.

Accepted (docs/http-api.md, "Authentication"):

- ``Bearer fkd_…``: an API token (what ``forkd`` sends);
- ``Bearer fkr_…``: a registry token from ``/v2/token`` (what OCI clients send after the
  challenge), or ``Bearer anonymous`` (the token an anonymous client receives);
- ``Basic base64(user:fkd_…)``: any user name, the API token as the password.

:func:`bearer_challenge` builds the ``WWW-Authenticate`` value of a 401 (Docker token auth).

Errors: ``Unauthorized`` (``malformed`` and whatever the token services raise).
"""

from __future__ import annotations

import base64
import binascii

from hub_server.auth.errors import Unauthorized
from hub_server.auth.registry_tokens import ANONYMOUS_TOKEN, REGISTRY_TOKEN_PREFIX, RegistryTokenService
from hub_server.auth.scopes import Principal
from hub_server.auth.tokens import TokenService

__all__ = ["Authenticator", "bearer_challenge"]


def bearer_challenge(realm: str, service: str, scope: str | None = None, error: str | None = None) -> str:
    """``Bearer realm="…",service="…"[,scope="…"][,error="…"]`` (values never hold quotes)."""
    params = {"realm": realm, "service": service, "scope": scope, "error": error}
    return "Bearer " + ",".join(f'{k}="{v}"' for k, v in params.items() if v)


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Principal`."""

    def __init__(self, tokens: TokenService, registry_tokens: RegistryTokenService) -> None:
        self.tokens = tokens
        self.registry_tokens = registry_tokens

    async def principal(self, authorization: str | None) -> Principal:
        """The caller for any accepted header (``None``: anonymous).

        Raises:
            Unauthorized: another scheme, a malformed value, or a token that is unknown,
                revoked or expired.
        """
        if authorization is None:
            return Principal.anonymous()
        scheme, credentials = _split(authorization)
        if scheme == "basic":
            return await self.tokens.authenticate(_basic_password(credentials))
        if credentials == ANONYMOUS_TOKEN or credentials.startswith(REGISTRY_TOKEN_PREFIX):
            return await self.registry_tokens.authenticate(credentials)
        return await self.tokens.authenticate(credentials)

    async def api_token_principal(self, authorization: str | None) -> Principal:
        """The caller of the token endpoint: an API token as Basic password or bearer, or anonymous.

        Raises:
            Unauthorized: as :meth:`principal`; registry tokens are not exchanged for new ones.
        """
        if authorization is None:
            return Principal.anonymous()
        scheme, credentials = _split(authorization)
        secret = _basic_password(credentials) if scheme == "basic" else credentials
        return await self.tokens.authenticate(secret)


def _split(authorization: str) -> tuple[str, str]:
    scheme, _, credentials = authorization.strip().partition(" ")
    scheme, credentials = scheme.lower(), credentials.strip()
    if scheme not in ("bearer", "basic"):
        raise Unauthorized("unsupported authorization scheme: use 'Bearer <token>' or Basic", "malformed")
    if not credentials or " " in credentials:
        raise Unauthorized(f"malformed authorization header: use '{scheme.title()} <credentials>'", "malformed")
    return scheme, credentials


def _basic_password(credentials: str) -> str:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthorized("malformed Basic credentials: not base64 of 'user:password'", "malformed") from None
    _user, sep, password = decoded.partition(":")
    if not sep:
        raise Unauthorized("malformed Basic credentials: not 'user:password'", "malformed")
    return password
