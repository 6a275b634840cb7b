"""Registry tokens and the Authorization header forms, against a real SQLite database."""

import base64
import re
from datetime import timedelta

import pytest

from hub_server.auth.credentials import Authenticator, bearer_challenge
from hub_server.auth.errors import Unauthorized
from hub_server.auth.models import utcnow
from hub_server.auth.registry_tokens import ANONYMOUS_TOKEN, REGISTRY_TOKEN_LIFETIME, RegistryTokenService
from hub_server.auth.scopes import Principal, Scope
from hub_server.auth.tokens import TokenService

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def auth(sessions, clock):
    return Authenticator(TokenService(sessions, clock=clock), RegistryTokenService(sessions, clock=clock))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_an_issued_token_carries_the_parent_name_and_only_the_granted_scopes(auth):
    api_token = await auth.tokens.create("ci", ["push:acme/*"], None)
    parent = await auth.principal(f"Bearer {api_token}")
    issued = await auth.registry_tokens.issue(parent, ["pull:acme/app"])
    assert re.fullmatch(r"fkr_[A-Za-z0-9_-]{43}", issued.token)
    assert issued.expires_in == REGISTRY_TOKEN_LIFETIME.total_seconds()
    principal = await auth.principal(f"Bearer {issued.token}")
    assert principal == Principal("ci", (Scope("pull", "acme/app"),), grantable=(Scope("push", "acme/*"),))
    assert not principal.can("push", "acme/app") and principal.could("push", "acme/app")


async def test_registry_tokens_expire_and_die_with_their_parent(auth, clock):
    api_token = await auth.tokens.create("ci", ["pull:acme/*"], None)
    issued = await auth.registry_tokens.issue(await auth.principal(f"Bearer {api_token}"), ["pull:acme/app"])
    clock.now += REGISTRY_TOKEN_LIFETIME
    with pytest.raises(Unauthorized) as expired:
        await auth.principal(f"Bearer {issued.token}")
    assert expired.value.reason == "expired"
    clock.now -= REGISTRY_TOKEN_LIFETIME
    await auth.tokens.revoke("ci")
    with pytest.raises(Unauthorized) as revoked:
        await auth.principal(f"Bearer {issued.token}")
    assert revoked.value.reason == "revoked"


async def test_a_registry_token_outlives_neither_an_expiring_parent(auth, clock):
    api_token = await auth.tokens.create("short", ["pull:acme/*"], timedelta(minutes=1))
    issued = await auth.registry_tokens.issue(await auth.principal(f"Bearer {api_token}"), [])
    clock.now += timedelta(minutes=2)
    with pytest.raises(Unauthorized) as info:
        await auth.registry_tokens.authenticate(issued.token)
    assert info.value.reason == "expired"


async def test_unknown_and_malformed_registry_tokens(auth):
    with pytest.raises(Unauthorized) as unknown:
        await auth.principal("Bearer fkr_" + "a" * 43)
    assert unknown.value.reason == "unknown"
    with pytest.raises(Unauthorized) as malformed:
        await auth.principal("Bearer fkr_short")
    assert malformed.value.reason == "malformed"


async def test_basic_auth_takes_any_user_and_the_api_token_as_password(auth):
    api_token = await auth.tokens.create("ci", ["pull:acme/*"], None)
    assert (await auth.principal(basic("whoever", api_token))).name == "ci"
    assert (await auth.api_token_principal(basic("", api_token))).name == "ci"
    for header in (basic("ci", "wrong"), "Basic !!!", "Basic " + base64.b64encode(b"no-colon").decode(), "Digest abc"):
        with pytest.raises(Unauthorized):
            await auth.principal(header)


async def test_the_anonymous_token_is_the_anonymous_caller_and_is_stored_nowhere(auth):
    issued = await auth.registry_tokens.issue(Principal.anonymous(), [])
    assert issued.token == ANONYMOUS_TOKEN
    assert (await auth.principal(f"Bearer {ANONYMOUS_TOKEN}")).is_anonymous


async def test_registry_tokens_are_not_exchanged_for_new_ones(auth):
    api_token = await auth.tokens.create("ci", ["pull:acme/*"], None)
    issued = await auth.registry_tokens.issue(await auth.principal(f"Bearer {api_token}"), ["pull:acme/app"])
    with pytest.raises(Unauthorized):
        await auth.api_token_principal(f"Bearer {issued.token}")


def test_the_challenge_lists_only_the_parameters_given():
    assert bearer_challenge("https://h/v2/token", "h") == 'Bearer realm="https://h/v2/token",service="h"'
    assert bearer_challenge("r", "s", "repository:a/b:pull", "invalid_token") == (
        'Bearer realm="r",service="s",scope="repository:a/b:pull",error="invalid_token"'
    )
