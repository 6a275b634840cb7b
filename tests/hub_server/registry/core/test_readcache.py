"""The read cache's own rules: TTL, invalidation, the epoch guard, the byte bound (hub_server/registry/core/readcache.py)."""

from __future__ import annotations

from hub_server.registry.core.readcache import CachedManifest, ReadCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repository_facts_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = ReadCache(ttl=2.0, clock=clock)
    facts = cache.remember_repository(7, "acme", "vm", True, cache.epoch)
    cache.remember_reference(facts, "v1", "sha256:a", cache.epoch)
    clock.now += 1.9
    assert cache.repository("acme", "vm") is facts and facts.tags == {"v1": "sha256:a"}
    clock.now += 0.1
    assert cache.repository("acme", "vm") is None


def test_forget_repository_drops_only_that_repository_and_guards_reads_in_flight() -> None:
    cache = ReadCache(ttl=60.0)
    cache.remember_repository(1, "acme", "vm", True, cache.epoch)
    other = cache.remember_repository(2, "acme", "db", False, cache.epoch)
    began = cache.epoch  # a read starts, then a write commits and forgets
    cache.forget_repository("acme", "vm")
    assert cache.repository("acme", "vm") is None and cache.repository("acme", "db") is other
    # what the read saw before the write is not kept
    stale = cache.remember_repository(1, "acme", "vm", True, began)
    cache.remember_reference(other, "v1", "sha256:old", began)
    assert cache.repository("acme", "vm") is None and stale.public
    assert other.tags == {}
    cache.forget_all()
    assert cache.repository("acme", "db") is None


def test_zero_ttl_keeps_no_repository_facts() -> None:
    cache = ReadCache(ttl=0)
    cache.remember_repository(1, "acme", "vm", True, cache.epoch)
    assert cache.repository("acme", "vm") is None


def test_manifests_are_kept_by_digest_within_the_byte_bound_least_recently_used_out() -> None:
    cache = ReadCache(manifest_bytes=10)
    a, b, c = (CachedManifest(f"sha256:{n}", "application/json", 4, bytes(4)) for n in "abc")
    cache.remember_manifest(a)
    cache.remember_manifest(b)
    assert cache.manifest("sha256:a") is a  # a is now the most recently used
    cache.remember_manifest(c)  # 12 bytes > 10: b goes
    assert cache.manifest("sha256:b") is None
    assert cache.manifest("sha256:a") is a and cache.manifest("sha256:c") is c
    cache.remember_manifest(CachedManifest("sha256:big", "application/json", 11, bytes(11)))
    assert cache.manifest("sha256:big") is None and cache.manifest("sha256:a") is a
