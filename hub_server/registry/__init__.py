"""Registry semantics: what push, pull, tag, delete, GC and lineage *mean*.

The middle layer of the hub (HTTP ``api/`` → **registry** → ``storage/``). Nothing here knows
about HTTP; services take a :class:`~hub_server.auth.scopes.Principal`, plain values and async
byte iterators, and raise :class:`~hub_server.errors.HubError`. ``service.Registry`` bundles
one instance of every service for the app and the CLI.
"""
