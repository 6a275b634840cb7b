"""What a manifest GET reads, kept in memory: the hot path of every fleet polling the hub.

Two kinds of entries, with different rules because they change differently:

- **Manifests by digest** (bytes, media type, size): immutable, so kept without expiry, least
  recently used first out once ``manifest_bytes`` bytes are held. Whether a repository *links*
  a digest is not part of this: that is a repository fact, below.
- **Repository facts** (the repository's id and visibility, tag → digest, which digests it links):
  one entry per repository, dropped whole after ``ttl`` seconds or as soon as this process
  changes anything about that repository (:meth:`ReadCache.forget_repository`, called by every
  write path after its commit: manifest push and tag moves, tag and manifest deletion, the
  visibility switch; :meth:`ReadCache.forget_all` after a garbage collection).

Across processes (``serve --workers N``, or replicas on one database) nothing is sent: another
process sees a tag moved, a manifest deleted or a repository made private at most ``ttl``
seconds later (default 2 s, ``FORKD_HUB_CACHE_TTL``; 0 turns the repository entries off).
A process always sees its own writes at once. Misses (an unknown tag or repository) are never
kept, so a new push is visible everywhere as soon as it commits.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CachedManifest", "ReadCache", "RepositoryFacts"]


@dataclass(frozen=True)
class CachedManifest:
    digest: str
    media_type: str
    size: int
    data: bytes


@dataclass
class RepositoryFacts:
    """What one repository looked like when it was read: duck-types ``Repository`` for access checks."""

    id: int
    namespace: str
    name: str
    public: bool
    expires: float
    tags: dict[str, str] = field(default_factory=dict)
    linked: set[str] = field(default_factory=set)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"


class ReadCache:
    """Per-process cache of manifest reads (see the module docstring for its rules)."""

    def __init__(
        self, ttl: float = 2.0, manifest_bytes: int = 64 << 20, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.manifest_bytes = manifest_bytes
        self._clock = clock
        self._repositories: dict[tuple[str, str], RepositoryFacts] = {}
        self._manifests: OrderedDict[str, CachedManifest] = OrderedDict()
        self._held = 0
        self.epoch = 0
        """Bumped by every ``forget_*``: a read that began before a write must not store what it read."""

    # Repository facts -------------------------------------------------------------------------

    def repository(self, namespace: str, name: str) -> RepositoryFacts | None:
        """The facts kept for ``namespace/name`` if they are younger than the TTL."""
        facts = self._repositories.get((namespace, name))
        if facts is None:
            return None
        if facts.expires <= self._clock():
            del self._repositories[(namespace, name)]
            return None
        return facts

    def remember_repository(self, repo_id: int, namespace: str, name: str, public: bool, epoch: int) -> RepositoryFacts:
        """Facts for a repository read from the database by a read that began at ``epoch``; kept
        only when ttl > 0 and no write happened in this process since that read began."""
        facts = RepositoryFacts(repo_id, namespace, name, public, self._clock() + self.ttl)
        if self.ttl > 0 and epoch == self.epoch:
            self._repositories[(namespace, name)] = facts
        return facts

    def remember_reference(self, facts: RepositoryFacts, tag: str | None, digest: str, epoch: int) -> None:
        """Record that ``tag`` (or the digest itself, for ``None``) resolves to ``digest`` in ``facts``' repository."""
        if epoch != self.epoch:
            return
        if tag is not None:
            facts.tags[tag] = digest
        else:
            facts.linked.add(digest)

    def forget_repository(self, namespace: str, name: str) -> None:
        """Drop everything known about one repository: THE invalidation every write path calls
        after its commit (tag moved or deleted, manifest linked or deleted, visibility changed)."""
        self.epoch += 1
        self._repositories.pop((namespace, name), None)

    def forget_all(self) -> None:
        """Drop every repository entry (after a garbage collection, which may unlink anywhere)."""
        self.epoch += 1
        self._repositories.clear()

    # Manifests by digest ----------------------------------------------------------------------

    def manifest(self, digest: str) -> CachedManifest | None:
        found = self._manifests.get(digest)
        if found is not None:
            self._manifests.move_to_end(digest)
        return found

    def remember_manifest(self, manifest: CachedManifest) -> None:
        """Keep a manifest's bytes (immutable: named by their digest), evicting the least recently used."""
        size = len(manifest.data)
        if size > self.manifest_bytes or manifest.digest in self._manifests:
            return
        self._manifests[manifest.digest] = manifest
        self._held += size
        while self._held > self.manifest_bytes:
            _, evicted = self._manifests.popitem(last=False)
            self._held -= len(evicted.data)
