"""A pull-through mirror of another hub: ``forkd-hub serve --mirror-of URL`` (docs/mirrors.md).

A caching, verifying read-through proxy, not a second registry: reads (``/v2`` manifests, blobs, tags,
referrers, the chain, ``registry.json``) are answered from the mirror's own blob store and fetched from the
upstream on first request, verified against their digests, one upstream fetch per object at a time.
Access is the upstream's: every client credential is checked against it (answers cached for a short TTL).
Writes are refused with a message naming the upstream.

Modules: ``index`` (what is cached: SQLite), ``upstream`` (the HTTP client for the upstream),
``cache`` (verified objects in the blob store, single-flight, LRU eviction), ``access`` (the upstream's
answer per credential and repository), ``service`` (the read logic), ``routes`` and ``app`` (HTTP).
"""
