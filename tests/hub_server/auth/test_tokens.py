"""Token lifecycle against a real SQLite database: create, authenticate, list, revoke, expire."""

import re
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from hub_server.auth.errors import (
    InvalidDuration,
    InvalidScope,
    InvalidTokenName,
    TokenExists,
    TokenNotFound,
    Unauthorized,
)
from hub_server.auth.models import utcnow
from hub_server.auth.scopes import Scope
from hub_server.auth.tokens import TokenService, hash_secret, parse_duration

pytestmark = pytest.mark.anyio

TOKEN_FORMAT = re.compile(r"fkd_[A-Za-z0-9_-]{43}")


class Clock:
    """A settable clock so expiry and last-used throttling are tested without sleeping."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self):
        return self.now

    def advance(self, **kwargs) -> None:
        self.now += timedelta(**kwargs)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tokens(sessions, clock) -> TokenService:
    return TokenService(sessions, clock=clock)


async def test_create_authenticate_list_revoke(tokens):
    secret = await tokens.create("ci", ["push:acme/*", "pull:*/*"], timedelta(days=30))
    assert TOKEN_FORMAT.fullmatch(secret)

    principal = await tokens.authenticate(secret)
    assert principal.name == "ci"
    assert principal.scopes == (Scope.parse("push:acme/*"), Scope.parse("pull:*/*"))
    assert principal.can("push", "acme/x") and not principal.can("push", "other/x")

    [info] = await tokens.list()
    assert info.name == "ci" and info.prefix == secret[:8]
    assert info.scopes == ("push:acme/*", "pull:*/*")
    assert info.status() == "active"
    assert secret not in repr(info) and secret not in str(info.to_json())
    assert info.expires_at - info.created_at == timedelta(days=30)

    revoked = await tokens.revoke("ci")
    assert revoked.revoked_at is not None
    with pytest.raises(Unauthorized) as info_exc:
        await tokens.authenticate(secret)
    assert info_exc.value.reason == "revoked"
    [listed] = await tokens.list()
    assert listed.status() == "revoked"


async def test_revoking_twice_or_an_unknown_name_is_not_found(tokens):
    await tokens.create("ci", ["pull:a/b"], None)
    await tokens.revoke("ci")
    with pytest.raises(TokenNotFound, match="already revoked"):
        await tokens.revoke("ci")
    with pytest.raises(TokenNotFound, match="no such token") as info:
        await tokens.revoke("nope")
    assert isinstance(info.value, LookupError)


async def test_a_revoked_name_can_be_reused_and_the_old_secret_stays_dead(tokens):
    old = await tokens.create("ci", ["pull:a/b"], None)
    with pytest.raises(TokenExists):
        await tokens.create("ci", ["pull:a/b"], None)
    await tokens.revoke("ci")
    new = await tokens.create("ci", ["push:a/b"], None)
    assert (await tokens.authenticate(new)).can("push", "a/b")
    with pytest.raises(Unauthorized):
        await tokens.authenticate(old)
    assert [t.status() for t in await tokens.list()] == ["revoked", "active"]
    assert (await tokens.get("ci")).scopes == ("push:a/b",)


async def test_expired_tokens_are_unauthorized(tokens, clock):
    secret = await tokens.create("short", ["pull:a/b"], timedelta(hours=1))
    clock.advance(minutes=59)
    assert (await tokens.authenticate(secret)).name == "short"
    clock.advance(minutes=1)
    with pytest.raises(Unauthorized) as info:
        await tokens.authenticate(secret)
    assert info.value.reason == "expired"
    assert (await tokens.get("short")).status(clock()) == "expired"
    with pytest.raises(TokenExists):  # expired but not revoked: the name is still taken
        await tokens.create("short", ["pull:a/b"], None)


async def test_never_expiring_tokens(tokens, clock):
    secret = await tokens.create("forever", ["admin"], None)
    clock.advance(days=3650)
    assert (await tokens.authenticate(secret)).is_admin


async def test_only_the_hash_is_stored(tokens, data_dir: Path):
    secret = await tokens.create("ci", ["pull:a/b"], None)
    await tokens.authenticate(secret)
    files = [p for p in data_dir.iterdir() if p.name.startswith("hub.db")]
    stored = b"".join(p.read_bytes() for p in files)
    # The row really is in these bytes (WAL included) …
    assert hash_secret(secret).encode() in stored
    assert b"pull:a/b" in stored
    # … and the secret is not, neither whole nor beyond its display prefix.
    assert secret.encode() not in stored
    assert secret[4:20].encode() not in stored


async def test_unknown_and_malformed_tokens(tokens):
    await tokens.create("private-name", ["pull:a/b"], None)
    with pytest.raises(Unauthorized) as unknown:
        await tokens.authenticate("fkd_" + "A" * 43)
    assert unknown.value.reason == "unknown"
    assert "private-name" not in str(unknown.value)
    for bad in ["", "fkd_", "fkd_short", "ghp_" + "A" * 43, "fkd_" + "A" * 44, "fkd_" + "!" * 43]:
        with pytest.raises(Unauthorized) as malformed:
            await tokens.authenticate(bad)
        assert malformed.value.reason == "malformed"


async def test_last_used_is_written_at_most_once_a_minute(tokens, clock):
    secret = await tokens.create("ci", ["pull:a/b"], None)
    assert (await tokens.get("ci")).last_used_at is None
    first = clock()
    await tokens.authenticate(secret)
    assert (await tokens.get("ci")).last_used_at == first
    clock.advance(seconds=59)
    await tokens.authenticate(secret)
    assert (await tokens.get("ci")).last_used_at == first
    clock.advance(seconds=1)
    await tokens.authenticate(secret)
    assert (await tokens.get("ci")).last_used_at == clock()


@pytest.mark.parametrize("name", ["", "a" * 65, "has space", "slash/name", "ünï", "colon:x", "anonymous"])
async def test_invalid_names(tokens, name):
    with pytest.raises(InvalidTokenName):
        await tokens.create(name, ["pull:a/b"], None)


async def test_name_boundaries(tokens):
    await tokens.create("a" * 64, ["pull:a/b"], None)
    await tokens.create("A.b_c-9", ["pull:a/b"], None)
    assert {t.name for t in await tokens.list()} == {"a" * 64, "A.b_c-9"}


async def test_bad_scopes_and_expiry_are_rejected_before_anything_is_stored(tokens):
    with pytest.raises(InvalidScope, match="'pull:nope'"):
        await tokens.create("ci", ["pull:a/b", "pull:nope"], None)
    with pytest.raises(InvalidScope):
        await tokens.create("ci", [], None)
    with pytest.raises(InvalidScope):
        await tokens.create("ci", "pull:a/b", None)  # a string is not a list of scopes
    with pytest.raises(InvalidDuration):
        await tokens.create("ci", ["pull:a/b"], timedelta(0))
    assert await tokens.list() == []


async def test_duplicate_scopes_are_dropped(tokens):
    await tokens.create("ci", ["pull:a/b", "pull:a/b", "admin"], None)
    assert (await tokens.get("ci")).scopes == ("pull:a/b", "admin")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("3600s", timedelta(seconds=3600)),
        ("never", None),
    ],
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "0d", "30", "d", "1w", "1.5h", "-1d", "30 d", "Never", "1d2h"])
def test_parse_duration_rejects(text):
    with pytest.raises(InvalidDuration, match=re.escape(repr(text))):
        parse_duration(text)


async def test_concurrent_creates_of_one_name_yield_one_token(tokens):
    outcomes: list[str] = []

    async def attempt() -> None:
        try:
            await tokens.create("race", ["pull:a/b"], None)
            outcomes.append("created")
        except TokenExists:
            outcomes.append("exists")

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(attempt)
    assert sorted(outcomes) == ["created"] + ["exists"] * 4
    assert [t.name for t in await tokens.list()] == ["race"]
