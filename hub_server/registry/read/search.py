"""Catalog search: full text over namespace, name, description, tag names and annotation values,
filtered by namespace and by the compatibility metadata of tagged layers (VMM, memory, arch),
sorted, paginated, and only over repositories the caller may read.

SQLite reads the FTS5 table ``repository_search`` (``db.search_index``), ranks with ``bm25`` and
marks matches with ``highlight``/``snippet``; PostgreSQL matches the ``tsvector`` column of its
``repository_search`` table (GIN index), ranks with ``ts_rank`` and marks with ``ts_headline``. Both mark matches with the control characters
:data:`MARK_START` / :data:`MARK_END`, which :func:`segments` turns into ``(text, matched)`` pairs
so the page escapes every piece itself: no markup ever comes out of the database.

The user's words become prefix terms (``numpy`` matches ``numpy-1.26``); punctuation and query
syntax are dropped, so no input can make the ``MATCH`` expression fail.

Errors: ``HubError(INVALID_REQUEST)`` for a bad sort or page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, column, exists, func, literal_column, or_, select, table, true
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import Manifest, Repository, Tag
from hub_server.db.search_index import FTS_TABLE, has_fts5
from hub_server.errors import ErrorCode, HubError

__all__ = [
    "MARK_END",
    "MARK_START",
    "SORTS",
    "Facets",
    "RepoCard",
    "SearchQuery",
    "SearchResults",
    "facets",
    "search_repositories",
    "segments",
    "terms",
    "visible",
]

MARK_START, MARK_END = "\x02", "\x03"
SORTS = ("relevance", "updated", "pulls", "name")
MAX_PER_PAGE = 100
_WORD = re.compile(r"\w+", re.UNICODE)
_MAX_TERMS = 8
_FTS = table(FTS_TABLE, column("rowid"))
_PG_INDEX = table(FTS_TABLE, column("repository_id"), column("document"))

Segments = list[tuple[str, bool]]


@dataclass(frozen=True)
class SearchQuery:
    q: str = ""
    namespace: str | None = None
    vmm: str | None = None
    mem_mib: int | None = None
    arch: str | None = None
    sort: str = ""
    page: int = 1
    per_page: int = 20

    @property
    def effective_sort(self) -> str:
        """``relevance`` when there are words to rank by, else ``updated`` unless chosen."""
        if self.sort:
            return self.sort if (self.sort != "relevance" or terms(self.q)) else "updated"
        return "relevance" if terms(self.q) else "updated"


@dataclass(frozen=True)
class RepoCard:
    """One repository in a listing; ``highlights`` maps a field to its marked-up segments."""

    namespace: str
    name: str
    public: bool
    description: str
    updated: datetime
    pull_count: int
    tag_count: int
    highlights: dict[str, Segments] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class SearchResults:
    items: list[RepoCard]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


@dataclass(frozen=True)
class Facets:
    """The values the filters offer (only from repositories the caller may read)."""

    namespaces: list[str]
    vmms: list[str]
    mem_mibs: list[int]
    arches: list[str]


def terms(q: str) -> list[str]:
    """The words of a query, lowercased, at most eight."""
    return [w.lower() for w in _WORD.findall(q or "")][:_MAX_TERMS]


def segments(marked: str | None) -> Segments:
    """Split text marked with MARK_START/MARK_END into ``(text, matched)`` pieces."""
    out: Segments = []
    for i, piece in enumerate(re.split(f"[{MARK_START}{MARK_END}]", marked or "")):
        if piece:
            out.append((piece, i % 2 == 1))
    return out


def _glob(column: Any, pattern: str) -> ColumnElement[bool]:
    if "*" not in pattern:
        return column == pattern
    like = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace("*", "%")
    return column.like(like, escape="\\")


def visible(principal: Principal) -> ColumnElement[bool]:
    """SQL for "``principal`` may read this repository" (``access.can_read``, as a WHERE clause)."""
    if principal.is_admin:
        return true()
    clauses: list[ColumnElement[bool]] = [col(Repository.public).is_(True)]
    for scope in principal.scopes:
        if scope.pattern is not None:  # pull, push and delete all imply pull
            namespace, name = scope.pattern.split("/")
            clauses.append(and_(_glob(col(Repository.namespace), namespace), _glob(col(Repository.name), name)))
    return or_(*clauses)


def _compat_filter(query: SearchQuery) -> ColumnElement[bool] | None:
    conditions = []
    if query.vmm:
        conditions.append(Manifest.compat["vmm"].as_string() == query.vmm)
    if query.mem_mib is not None:
        conditions.append(Manifest.compat["memMiB"].as_integer() == query.mem_mib)
    if query.arch:
        conditions.append(Manifest.compat["arch"].as_string() == query.arch)
    if not conditions:
        return None
    return exists(
        select(Tag.name)
        .join(Manifest, col(Manifest.digest) == col(Tag.manifest_digest))
        .where(col(Tag.repository_id) == col(Repository.id), *conditions)
    )


def _check(query: SearchQuery) -> None:
    if query.sort and query.sort not in SORTS:
        raise HubError(
            ErrorCode.INVALID_REQUEST,
            f"unknown sort {query.sort[:40]!r}: use one of {', '.join(SORTS)}",
            {"field": "sort"},
        )
    if query.page < 1 or not 1 <= query.per_page <= MAX_PER_PAGE:
        raise HubError(ErrorCode.INVALID_REQUEST, "page must be 1 or more and per_page 1 to 100", {"field": "page"})


async def search_repositories(session: AsyncSession, principal: Principal, query: SearchQuery) -> SearchResults:
    """One page of readable repositories matching ``query``. Raises HubError(INVALID_REQUEST)."""
    _check(query)
    words = terms(query.q)
    where: list[ColumnElement[bool]] = [visible(principal)]
    if query.namespace:
        where.append(col(Repository.namespace) == query.namespace)
    compat = _compat_filter(query)
    if compat is not None:
        where.append(compat)
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    text_match = _FullText.for_dialect(dialect, words)
    if text_match is not None:
        where.append(text_match.condition)
    base = select(Repository.id).where(*where)
    if text_match is not None:
        base = text_match.join(base)
    total = (await session.exec(select(func.count()).select_from(base.subquery()))).scalar_one()

    tag_count = select(func.count()).where(col(Tag.repository_id) == col(Repository.id)).scalar_subquery()
    columns: list[Any] = [Repository, tag_count.label("tag_count")]
    if text_match is not None:
        columns += text_match.marked_columns()
    rows_query = select(*columns).where(*where)
    if text_match is not None:
        rows_query = text_match.join(rows_query)
    order = {
        "updated": [col(Repository.updated_at).desc()],
        "pulls": [col(Repository.pull_count).desc()],
        "name": [],
        "relevance": [text_match.rank()] if text_match is not None else [],
    }[query.effective_sort]
    rows_query = rows_query.order_by(*order, col(Repository.namespace), col(Repository.name))
    rows_query = rows_query.limit(query.per_page).offset((query.page - 1) * query.per_page)
    items = []
    for row in (await session.exec(rows_query)).all():
        repo, count, *marked = row
        highlights = dict(zip(_FullText.FIELDS, (segments(m) for m in marked), strict=True)) if marked else {}
        items.append(
            RepoCard(
                repo.namespace,
                repo.name,
                repo.public,
                repo.description,
                repo.updated_at,
                repo.pull_count,
                count,
                {k: v for k, v in highlights.items() if any(m for _, m in v)},
            )
        )
    return SearchResults(items, total, query.page, query.per_page)


class _FullText:
    """The dialect's full-text condition, ranking and marked-up columns for a list of words."""

    FIELDS = ("namespace", "name", "description", "tags", "annotations")

    def __init__(self, words: list[str]) -> None:
        self.words = words

    @staticmethod
    def for_dialect(dialect: str, words: list[str]) -> _FullText | None:
        if not words:
            return None
        return _Fts5(words) if has_fts5(dialect) else _PostgresText(words)

    condition: ColumnElement[bool]

    def join(self, query: Any) -> Any:
        return query

    def rank(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def marked_columns(self) -> list[Any]:  # pragma: no cover - overridden
        raise NotImplementedError


class _Fts5(_FullText):
    def __init__(self, words: list[str]) -> None:
        super().__init__(words)
        expression = " ".join(f'"{w}"*' for w in words)  # words are \w+ only: no quotes inside
        self.table = literal_column(FTS_TABLE)
        self.condition = self.table.op("MATCH")(expression)

    def join(self, query: Any) -> Any:
        return query.join(_FTS, _FTS.c.rowid == col(Repository.id))

    def rank(self) -> Any:
        return func.bm25(self.table, 10.0, 10.0, 2.0, 4.0, 1.0)

    def marked_columns(self) -> list[Any]:
        return [
            func.highlight(self.table, 0, MARK_START, MARK_END),
            func.highlight(self.table, 1, MARK_START, MARK_END),
            func.snippet(self.table, 2, MARK_START, MARK_END, "…", 24),
            func.snippet(self.table, 3, MARK_START, MARK_END, "…", 12),
            func.snippet(self.table, 4, MARK_START, MARK_END, "…", 12),
        ]


class _PostgresText(_FullText):
    """PostgreSQL: the ``tsvector`` table; headlines are built from the same texts for the page's rows."""

    def __init__(self, words: list[str]) -> None:
        super().__init__(words)
        tags = (
            select(func.coalesce(func.string_agg(col(Tag.name), " "), ""))
            .where(col(Tag.repository_id) == col(Repository.id))
            .scalar_subquery()
        )
        values = func.json_each_text(Manifest.annotations).table_valued("value")
        annotations = (
            select(func.coalesce(func.string_agg(values.c.value, " "), ""))
            .select_from(Tag)
            .join(Manifest, col(Manifest.digest) == col(Tag.manifest_digest))
            .join(values, true())
            .where(col(Tag.repository_id) == col(Repository.id))
            .scalar_subquery()
        )
        self.texts = [col(Repository.namespace), col(Repository.name), col(Repository.description), tags, annotations]
        self.query = func.to_tsquery("simple", " & ".join(f"{w}:*" for w in words))
        self.condition = _PG_INDEX.c.document.op("@@")(self.query)

    def join(self, query: Any) -> Any:
        return query.join(_PG_INDEX, _PG_INDEX.c.repository_id == col(Repository.id))

    def rank(self) -> Any:
        return func.ts_rank(_PG_INDEX.c.document, self.query).desc()

    def marked_columns(self) -> list[Any]:
        whole = f"StartSel={MARK_START}, StopSel={MARK_END}, HighlightAll=true"
        short = f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=24, MinWords=8"
        return [func.ts_headline("simple", t, self.query, whole if i < 2 else short) for i, t in enumerate(self.texts)]


async def facets(session: AsyncSession, principal: Principal) -> Facets:
    """The namespaces and compatibility values present among readable repositories."""
    namespaces = (
        (
            await session.exec(
                select(Repository.namespace).where(visible(principal)).distinct().order_by(col(Repository.namespace))
            )
        )
        .scalars()
        .all()
    )
    vmm = Manifest.compat["vmm"].as_string()
    mem = Manifest.compat["memMiB"].as_integer()
    arch = Manifest.compat["arch"].as_string()
    rows = (
        await session.exec(
            select(vmm, mem, arch)
            .select_from(Tag)
            .join(Manifest, col(Manifest.digest) == col(Tag.manifest_digest))
            .join(Repository, col(Repository.id) == col(Tag.repository_id))
            .where(visible(principal))
            .group_by(vmm, mem, arch)
        )
    ).all()
    return Facets(
        list(namespaces),
        sorted({v for v, _, _ in rows if v}),
        sorted({m for _, m, _ in rows if m}),
        sorted({a for _, _, a in rows if a}),
    )
