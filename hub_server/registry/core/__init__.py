"""The registry's floor, which every wing uses: the services' shared context (``context.py``), the
manifest read cache, SQL helpers, name and reference validation, the storage key layout (``paths.py``,
the one builder of keys), and who may read or change which repository (``access.py``).
Imports nothing else of ``hub_server.registry``."""
