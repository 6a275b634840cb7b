"""Registry semantics: what push, pull, tag, delete, GC and lineage *mean*.

The middle layer of the hub (HTTP ``api/`` → **registry** → ``storage/``). Nothing here knows
about HTTP. A request's repository is resolved and authorized once (``core/access.py``:
:class:`~hub_server.registry.core.access.RepositoryScope`, from ``Registry.scope``); services take that
scope, plain values and async byte iterators, and raise :class:`~hub_server.errors.HubError`.
``service.Registry`` bundles one instance of every service for the app and the CLI.

Six wings, layered (an import-linter contract, docs/architecture.md): ``upkeep`` over ``forkd`` over
``push`` | ``read``, both over ``content``, everything over ``core``.
"""
