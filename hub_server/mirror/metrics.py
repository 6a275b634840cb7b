"""The mirror's Prometheus metrics (``GET /metrics``), in a registry of their own (several apps per test process).

forkd_mirror_hits_total{kind}          reads answered from the cache (kind: blob, manifest, tag, doc)
forkd_mirror_misses_total{kind}        reads that had to ask the upstream
forkd_mirror_upstream_fetches_total{kind}   objects fetched from the upstream (one per single-flight group)
forkd_mirror_upstream_bytes_total      bytes of objects fetched from the upstream
forkd_mirror_evictions_total           objects evicted by the size limit
forkd_mirror_auth_checks_total{answer} credential checks asked of the upstream (allow, deny, unreachable)
forkd_mirror_stale_total               stale tags or documents served while the upstream was unreachable
forkd_mirror_cache_bytes               bytes of objects held
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

__all__ = ["MirrorMetrics"]


class MirrorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.hits = Counter("forkd_mirror_hits", "Reads answered from the mirror's cache", ["kind"], registry=r)
        self.misses = Counter("forkd_mirror_misses", "Reads the mirror had to ask its upstream", ["kind"], registry=r)
        self.fetches = Counter(
            "forkd_mirror_upstream_fetches", "Objects fetched from the upstream", ["kind"], registry=r
        )
        self.upstream_bytes = Counter(
            "forkd_mirror_upstream_bytes", "Object bytes fetched from the upstream", registry=r
        )
        self.evictions = Counter("forkd_mirror_evictions", "Objects evicted by the cache size limit", registry=r)
        self.auth_checks = Counter(
            "forkd_mirror_auth_checks", "Credential checks asked of the upstream", ["answer"], registry=r
        )
        self.stale = Counter(
            "forkd_mirror_stale", "Stale answers served while the upstream was unreachable", registry=r
        )
        self.cache_bytes = Gauge("forkd_mirror_cache_bytes", "Bytes of objects the mirror holds", registry=r)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (0 when absent), for tests and the health answer."""
        return self.registry.get_sample_value(name, labels) or 0.0
