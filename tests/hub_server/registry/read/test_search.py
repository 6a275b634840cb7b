"""Catalog search internals: the SQL visibility clause agrees with ``access.can_read``; words and marks."""

from __future__ import annotations

import pytest
from sqlmodel import col, select

from hub_server.auth.scopes import Principal
from hub_server.db.models import Repository
from hub_server.errors import HubError
from hub_server.registry.core.access import can_read
from hub_server.registry.read.search import SearchQuery, search_repositories, segments, terms, visible
from tests.hub_server.conftest import Hub

NAMES = ["acme/py-base", "acme/py_x", "acme-x/y", "acmex/py-base", "beta/secret", "beta/s3", "gamma/tools", "a/b"]
SCOPES = [
    (),
    ("pull:acme/*",),
    ("push:beta/secret",),
    ("delete:*/tools",),
    ("pull:*/*",),
    ("admin",),
    ("pull:acme/py_*",),
    ("pull:acme/py-*", "push:beta/s*"),
    ("pull:a*/*",),
]


@pytest.fixture
def repos(hub: Hub) -> list[Repository]:
    async def make() -> list[Repository]:
        async with hub.registry.ctx.sessions() as session:
            for i, full in enumerate(NAMES):
                namespace, name = full.split("/")
                session.add(Repository(namespace=namespace, name=name, public=(i % 3 == 0)))
            await session.commit()
            return list((await session.exec(select(Repository))).all())

    return hub.call(make)


@pytest.mark.parametrize("scopes", SCOPES, ids=lambda s: ",".join(s) or "anonymous")
def test_visible_clause_agrees_with_can_read(hub: Hub, repos: list[Repository], scopes: tuple[str, ...]) -> None:
    principal = Principal.with_scopes("t", scopes) if scopes else Principal.anonymous()

    async def query() -> set[str]:
        async with hub.registry.ctx.sessions() as session:
            rows = await session.exec(select(Repository).where(visible(principal)).order_by(col(Repository.id)))
            return {r.full_name for r in rows.all()}

    assert hub.call(query) == {r.full_name for r in repos if can_read(principal, r)}


def test_terms_and_segments() -> None:
    assert terms('NumPy "1.26" AND (x* OR -y) NEAR/3') == ["numpy", "1", "26", "and", "x", "or", "y", "near"]
    assert terms("") == [] and len(terms("a " * 50)) == 8
    assert segments("py-\x02numpy\x03 and \x02np\x03") == [
        ("py-", False),
        ("numpy", True),
        (" and ", False),
        ("np", True),
    ]
    assert segments(None) == []


def test_bad_sort_and_page_are_typed_errors(hub: Hub) -> None:
    async def run(query: SearchQuery) -> None:
        async with hub.registry.ctx.sessions() as session:
            await search_repositories(session, Principal.anonymous(), query)

    for query, field in [
        (SearchQuery(sort="best"), "sort"),
        (SearchQuery(page=0), "page"),
        (SearchQuery(per_page=1000), "page"),
    ]:
        with pytest.raises(HubError) as e:
            hub.call(run, query)
        assert e.value.code == "INVALID_REQUEST" and e.value.detail == {"field": field}
