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
import time
from collections.abc import Callable

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
    """Turns an ``Authorization`` header into a :class:`Principal`.

    Accepted headers are remembered for ``cache_ttl`` seconds (never past the token's own
    expiry), so a client polling with one token costs one database lookup per TTL, not one per
    request. A token revoked elsewhere (``forkd-hub token revoke`` is another process) is
    refused at most ``cache_ttl`` seconds later; ``cache_ttl=0`` checks every request.
    Refusals are never remembered.
    """

    MAX_CACHED = 10_000
    """Accepted headers kept at most (all forgotten when full: a flood of valid tokens only costs lookups)."""

    def __init__(
        self,
        tokens: TokenService,
        registry_tokens: RegistryTokenService,
        *,
        cache_ttl: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tokens = tokens
        self.registry_tokens = registry_tokens
        self.cache_ttl = cache_ttl
        self._clock = clock
        self._accepted: dict[str, tuple[Principal, float]] = {}

    async def principal(self, authorization: str | None) -> Principal:
        """The caller for any accepted header (``None``: anonymous).

        Raises:
            Unauthorized: another scheme, a malformed value, or a token that is unknown,
                revoked or expired.
        """
        if authorization is None:
            return Principal.anonymous()
        now = self._clock()
        hit = self._accepted.get(authorization)
        if hit is not None and hit[1] > now:
            return hit[0]
        principal, left = await self._authenticate(authorization)
        if self.cache_ttl > 0:
            if len(self._accepted) >= self.MAX_CACHED:
                self._accepted.clear()
            self._accepted[authorization] = (
                principal,
                now + (self.cache_ttl if left is None else min(self.cache_ttl, left)),
            )
        return principal

    async def _authenticate(self, authorization: str) -> tuple[Principal, float | None]:
        scheme, credentials = _split(authorization)
        if scheme == "basic":
            return await self.tokens.authenticate_with_lifetime(_basic_password(credentials))
        if credentials == ANONYMOUS_TOKEN or credentials.startswith(REGISTRY_TOKEN_PREFIX):
            return await self.registry_tokens.authenticate_with_lifetime(credentials)
        return await self.tokens.authenticate_with_lifetime(credentials)

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
