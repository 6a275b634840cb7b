"""The Authenticator's cache of accepted headers: revocation within the TTL, never past expiry."""

from datetime import timedelta

import pytest

from hub_server.auth.credentials import Authenticator
from hub_server.auth.errors import Unauthorized
from hub_server.auth.models import utcnow
from hub_server.auth.registry_tokens import REGISTRY_TOKEN_LIFETIME, RegistryTokenService
from hub_server.auth.tokens import TokenService

pytestmark = pytest.mark.anyio


class Clock:
    """One time line for the token services (aware datetimes) and the cache (monotonic seconds)."""

    def __init__(self) -> None:
        self.start = self.now = utcnow()

    def __call__(self):
        return self.now

    def seconds(self) -> float:
        return (self.now - self.start).total_seconds()


@pytest.fixture
def clock():
    return Clock()


def authenticator(sessions, clock: Clock, ttl: float) -> Authenticator:
    return Authenticator(
        TokenService(sessions, clock=clock),
        RegistryTokenService(sessions, clock=clock),
        cache_ttl=ttl,
        clock=clock.seconds,
    )


async def test_a_revoked_token_is_refused_once_the_ttl_has_passed(sessions, clock):
    auth = authenticator(sessions, clock, ttl=2.0)
    secret = await auth.tokens.create("ci", ["pull:acme/*"], None)
    header = f"Bearer {secret}"
    assert (await auth.principal(header)).name == "ci"
    await TokenService(sessions, clock=clock).revoke("ci")  # as `forkd-hub token revoke` does, elsewhere
    clock.now += timedelta(seconds=1.5)
    assert (await auth.principal(header)).name == "ci"  # still within the TTL: the cached answer
    clock.now += timedelta(seconds=0.5)
    with pytest.raises(Unauthorized) as refused:
        await auth.principal(header)
    assert refused.value.reason == "revoked"


async def test_without_a_ttl_every_request_is_checked(sessions, clock):
    auth = authenticator(sessions, clock, ttl=0)
    secret = await auth.tokens.create("ci", ["pull:acme/*"], None)
    assert (await auth.principal(f"Bearer {secret}")).name == "ci"
    await auth.tokens.revoke("ci")
    with pytest.raises(Unauthorized):
        await auth.principal(f"Bearer {secret}")


async def test_the_cache_never_outlives_the_token(sessions, clock):
    auth = authenticator(sessions, clock, ttl=3600.0)
    secret = await auth.tokens.create("ci", ["pull:acme/*"], timedelta(seconds=10))
    assert (await auth.principal(f"Bearer {secret}")).name == "ci"
    clock.now += timedelta(seconds=10)
    with pytest.raises(Unauthorized) as refused:
        await auth.principal(f"Bearer {secret}")
    assert refused.value.reason == "expired"
    # a registry token ends with its own lifetime, whatever the TTL
    parent = await auth.tokens.create("bot", ["pull:acme/*"], None)
    issued = await auth.registry_tokens.issue(await auth.principal(f"Bearer {parent}"), ["pull:acme/app"])
    assert (await auth.principal(f"Bearer {issued.token}")).name == "bot"
    clock.now += REGISTRY_TOKEN_LIFETIME
    with pytest.raises(Unauthorized) as gone:
        await auth.principal(f"Bearer {issued.token}")
    assert gone.value.reason == "expired"


async def test_refusals_are_not_cached(sessions, clock):
    auth = authenticator(sessions, clock, ttl=3600.0)
    bad = "Bearer fkd_" + "A" * 43
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await auth.principal(bad)
    assert auth._accepted == {}
