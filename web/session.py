"""Browser sessions and CSRF protection for the catalog.

Signing in posts a hub token. The session cookie (:data:`SESSION_COOKIE`) is the token and a random
session id sealed with Fernet (AES-128-CBC + HMAC-SHA256, with its creation time): nobody can read or
forge it without the hub's key, and it expires after :data:`SESSION_TTL` even if the browser keeps
it. Every request re-authenticates the sealed token with ``TokenService``, so revoking or expiring
the token ends the session at once. Signing out ends the session on the server too: its id is
recorded (``hub_server.auth.web_sessions``) until the cookie would expire, and a copy of the cookie
is refused from then on, on every replica. The cookie is ``HttpOnly``, ``SameSite=Lax``, ``Path=/``,
and ``Secure`` when the request came over https.

CSRF: every state-changing form (sign-in, sign-out) carries a token that is the HMAC of a random
nonce kept in the :data:`CSRF_COOKIE` cookie; a POST without the matching pair, or with an
``Origin`` of another site, is refused with 403 before anything else happens.

The key is ``DATA_DIR/web-session.key`` (32 random bytes, mode 0600, created on first start);
hubs that share sessions behind one load balancer share that file.

Errors: :class:`CsrfRejected` (403), :class:`SignInFailed` (the form shows its message).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from litestar import Request, Response

from hub_server.auth.errors import Unauthorized
from hub_server.auth.scopes import Principal
from hub_server.auth.tokens import TokenService
from hub_server.auth.web_sessions import WebSessionEnds

__all__ = [
    "CSRF_COOKIE",
    "SESSION_COOKIE",
    "SESSION_TTL",
    "CsrfRejected",
    "SessionKeys",
    "SignInFailed",
    "WebSession",
    "load_keys",
]

SESSION_COOKIE = "forkd_session"
CSRF_COOKIE = "forkd_csrf"
SESSION_TTL = 12 * 3600
KEY_FILE = "web-session.key"


class CsrfRejected(Exception):
    """A state-changing form arrived without a valid CSRF token (answered with 403)."""


class SignInFailed(Exception):
    """The token typed into the sign-in form is not a valid, unrevoked, unexpired hub token."""


@dataclass(frozen=True)
class SessionKeys:
    seal: Fernet
    mac: bytes


def load_keys(data_dir: Path) -> SessionKeys:
    """Read (or create, mode 0600) the hub's session key under ``data_dir``."""
    path = data_dir / KEY_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it first: use theirs
            raw = path.read_bytes()
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
    if len(raw) != 32:
        raise ValueError(f"{path} must hold exactly 32 bytes (delete it to make a new key)")
    seal_key = hashlib.sha256(b"forkd-hub web session seal\0" + raw).digest()
    mac_key = hashlib.sha256(b"forkd-hub web csrf\0" + raw).digest()
    return SessionKeys(Fernet(base64.urlsafe_b64encode(seal_key)), mac_key)


def _is_https(request: Request[Any, Any, Any]) -> bool:
    return request.url.scheme == "https"


@dataclass
class WebSession:
    """The session of one request: who it is, and the CSRF token its forms carry."""

    keys: SessionKeys
    request: Request[Any, Any, Any]
    principal: Principal
    nonce: str
    new_nonce: bool
    session_id: str | None = None
    """The signed-in session's id (None: anonymous); what signing out records as ended."""
    expires: datetime | None = None
    """When the session's cookie expires."""

    @classmethod
    async def load(
        cls, keys: SessionKeys, tokens: TokenService, request: Request[Any, Any, Any], ends: WebSessionEnds
    ) -> WebSession:
        """The session from the request's cookies (anonymous when absent, tampered, expired, signed
        out or revoked; a cookie sealed before sessions had ids is refused too: it could not be ended)."""
        principal, session_id, expires = Principal.anonymous(), None, None
        sealed = request.cookies.get(SESSION_COOKIE)
        if sealed:
            try:
                raw = sealed.encode("ascii")
                payload = json.loads(keys.seal.decrypt(raw, ttl=SESSION_TTL))
                sid = str(payload["sid"])
                if not await ends.ended(sid):
                    principal = await tokens.authenticate(str(payload["token"]))
                    session_id = sid
                    created = datetime.fromtimestamp(keys.seal.extract_timestamp(raw), UTC)
                    expires = created + timedelta(seconds=SESSION_TTL)
            except (InvalidToken, ValueError, KeyError, TypeError, UnicodeError, Unauthorized):
                principal, session_id, expires = Principal.anonymous(), None, None
        nonce = request.cookies.get(CSRF_COOKIE, "")
        fresh = not (16 <= len(nonce) <= 64 and nonce.isascii() and nonce.replace("-", "").replace("_", "").isalnum())
        return cls(keys, request, principal, secrets.token_urlsafe(24) if fresh else nonce, fresh, session_id, expires)

    @property
    def csrf_token(self) -> str:
        return hmac.new(self.keys.mac, self.nonce.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, submitted: str | None) -> None:
        """Raise CsrfRejected unless ``submitted`` matches this browser's nonce and the origin is ours."""
        origin = self.request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != self.request.url.netloc:
            raise CsrfRejected(f"cross-site form post from {origin[:100]}")
        if self.new_nonce or not submitted or not hmac.compare_digest(submitted, self.csrf_token):
            raise CsrfRejected("the form's security token is missing or stale: reload the page and try again")

    async def sign_in(self, tokens: TokenService, secret: str) -> Principal:
        """Authenticate ``secret``; raise SignInFailed with a reason the form can show."""
        try:
            return await tokens.authenticate(secret.strip())
        except Unauthorized as e:
            raise SignInFailed(f"that token was not accepted ({e.reason})") from None

    def sealed(self, secret: str) -> str:
        payload = {"token": secret.strip(), "sid": secrets.token_urlsafe(16)}
        return self.keys.seal.encrypt(json.dumps(payload).encode()).decode("ascii")

    async def sign_out(self, ends: WebSessionEnds) -> None:
        """End this session on the server: its cookie, wherever copied, is refused from now on."""
        if self.session_id is not None and self.expires is not None:
            await ends.end(self.session_id, self.expires)

    def finish(self, response: Response[Any], *, sign_in: str | None = None, sign_out: bool = False) -> Response[Any]:
        """Set the cookies this response must carry (CSRF nonce, a new or cleared session)."""
        secure = _is_https(self.request)
        if self.new_nonce:
            response.set_cookie(CSRF_COOKIE, self.nonce, path="/", httponly=True, secure=secure, samesite="lax")
        if sign_in is not None:
            response.set_cookie(
                SESSION_COOKIE,
                self.sealed(sign_in),
                max_age=SESSION_TTL,
                path="/",
                httponly=True,
                secure=secure,
                samesite="lax",
            )
        if sign_out:
            response.delete_cookie(SESSION_COOKIE, path="/")
        return response
