"""Read models: the catalog API, lineage and chains, referrers, and the web catalog's views (browse,
search, layer pages). Nothing here writes content (a chain read counts a pull). Imports ``content``
and ``core``, never ``push``."""
