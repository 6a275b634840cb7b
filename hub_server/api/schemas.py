"""Wire schemas (msgspec structs, camelCase on the wire); kept apart from the database tables.

Each ``from_*`` builds a wire object from a registry result, so controllers stay one-liners.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from hub_server.registry.content.policy import UNCHANGED, PolicyChange
from hub_server.registry.push.chunks import FrameQueryResult
from hub_server.registry.read.catalog import RepositoryDetail, RepositoryPage
from hub_server.registry.read.lineage import Chain, Lineage
from hub_server.registry.upkeep.deletion import DeleteResult

__all__ = [
    "ChainLinkOut",
    "ChainOut",
    "DeleteOut",
    "DependentOut",
    "FrameFoundOut",
    "FrameQuery",
    "FrameQueryOut",
    "HealthOut",
    "LineageOut",
    "LinkRefOut",
    "NamespacesOut",
    "PolicyOut",
    "RemovalOut",
    "RepositoriesOut",
    "RepositoryOut",
    "RepositoryPatch",
    "RepositorySummaryOut",
    "RetentionOut",
    "RetentionPatch",
    "TagListOut",
    "TagOut",
]


class _Wire(msgspec.Struct, rename="camel", kw_only=True):
    pass


class FrameQuery(_Wire):
    digests: list[str]


class FrameFoundOut(_Wire):
    length: int
    chunk: str


class FrameQueryOut(_Wire):
    found: dict[str, FrameFoundOut]
    missing: int

    @classmethod
    def from_result(cls, r: FrameQueryResult) -> FrameQueryOut:
        return cls(
            found={d: FrameFoundOut(length=f.length, chunk=f.chunk) for d, f in r.found.items()}, missing=r.missing
        )


class ChainLinkOut(_Wire):
    digest: str
    media_type: str
    size: int
    manifest: str
    config: str
    repository: str
    tags: list[str]


class ChainOut(_Wire):
    digest: str
    chain: list[ChainLinkOut]

    @classmethod
    def from_chain(cls, c: Chain) -> ChainOut:
        return cls(
            digest=c.digest,
            chain=[
                ChainLinkOut(
                    digest=x.digest,
                    media_type=x.media_type,
                    size=x.size,
                    manifest=x.manifest,
                    config=x.config,
                    repository=x.repository,
                    tags=x.tags,
                )
                for x in c.links
            ],
        )


class LinkRefOut(_Wire):
    digest: str
    repository: str
    tags: list[str]


class DependentOut(_Wire):
    repository: str
    tag: str
    digest: str


class LineageOut(_Wire):
    digest: str
    depth: int
    ancestors: list[LinkRefOut]
    dependents: list[DependentOut]
    logical_size: int
    stored_size: int
    shared_with_parent: int

    @classmethod
    def from_lineage(cls, x: Lineage) -> LineageOut:
        return cls(
            digest=x.digest,
            depth=x.depth,
            ancestors=[LinkRefOut(digest=a.digest, repository=a.repository, tags=a.tags) for a in x.ancestors],
            dependents=[DependentOut(repository=d.repository, tag=d.tag, digest=d.digest) for d in x.dependents],
            logical_size=x.logical_size,
            stored_size=x.stored_size,
            shared_with_parent=x.shared_with_parent,
        )


class NamespacesOut(_Wire):
    namespaces: list[str]


class RepositorySummaryOut(_Wire):
    name: str
    public: bool
    description: str
    tags: list[str]
    updated: datetime


class RepositoriesOut(_Wire):
    repositories: list[RepositorySummaryOut]

    @classmethod
    def from_page(cls, page: RepositoryPage) -> RepositoriesOut:
        return cls(
            repositories=[
                RepositorySummaryOut(
                    name=r.name, public=r.public, description=r.description, tags=r.tags, updated=r.updated
                )
                for r in page.items
            ]
        )


class TagOut(_Wire):
    name: str
    digest: str
    media_type: str
    size: int
    logical_size: int
    stored_size: int
    created: datetime
    updated: datetime


class RetentionOut(_Wire):
    keep_last: int | None
    keep_days: int | None
    pattern: str


class PolicyOut(_Wire):
    immutable_tags: bool
    immutable_exempt: str
    immutable_source: str
    """``repository`` (set on this repository) or ``hub`` (the hub-wide default)."""
    retention: RetentionOut | None


class RepositoryOut(_Wire):
    name: str
    public: bool
    description: str
    created: datetime
    updated: datetime
    tags: list[TagOut]
    policy: PolicyOut | None = None
    readme: str = ""
    pull_count: int = 0

    @classmethod
    def from_detail(cls, d: RepositoryDetail) -> RepositoryOut:
        return cls(
            name=d.name,
            public=d.public,
            description=d.description,
            readme=d.readme,
            pull_count=d.pull_count,
            created=d.created,
            updated=d.updated,
            tags=[
                TagOut(
                    name=t.name,
                    digest=t.digest,
                    media_type=t.media_type,
                    size=t.size,
                    logical_size=t.logical_size,
                    stored_size=t.stored_size,
                    created=t.created,
                    updated=t.updated,
                )
                for t in d.tags
            ],
            policy=None if d.policy is None else msgspec.convert(d.policy.to_json(), PolicyOut),
        )


class RetentionPatch(_Wire, forbid_unknown_fields=True):
    keep_last: int | None = None
    keep_days: int | None = None
    pattern: str | None = None


class RepositoryPatch(_Wire, forbid_unknown_fields=True):
    public: bool | None = None
    description: str | None = None
    readme: str | None = None
    immutable_tags: bool | msgspec.UnsetType | None = msgspec.UNSET
    """true/false on this repository; null: follow the hub default."""
    immutable_exempt: str | msgspec.UnsetType | None = msgspec.UNSET
    """Comma-separated tag globs that stay movable; null: the hub default."""
    retention: RetentionPatch | msgspec.UnsetType | None = msgspec.UNSET
    """Retention rules (replacing the current ones); null: no retention."""

    def policy_change(self) -> PolicyChange:
        def field(value: object) -> object:
            return UNCHANGED if value is msgspec.UNSET else value

        retention = self.retention
        return PolicyChange(
            immutable_tags=field(self.immutable_tags),  # type: ignore[arg-type]
            immutable_exempt=field(self.immutable_exempt),  # type: ignore[arg-type]
            retention=UNCHANGED
            if retention is msgspec.UNSET
            else None
            if retention is None
            else {"keepLast": retention.keep_last, "keepDays": retention.keep_days, "pattern": retention.pattern},
        )


class TagListOut(_Wire):
    name: str
    tags: list[str]


class CatalogOut(_Wire):
    repositories: list[str]


class RemovalOut(_Wire):
    repository: str
    digest: str | None
    tags: list[str]


class DeleteOut(_Wire):
    removed: list[RemovalOut]

    @classmethod
    def from_result(cls, r: DeleteResult) -> DeleteOut:
        return cls(removed=[RemovalOut(repository=x.repository, digest=x.digest, tags=x.tags) for x in r.removed])


class HealthOut(_Wire):
    status: str
    database: str
    storage: str
