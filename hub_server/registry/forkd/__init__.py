"""forkd interoperability: forkd's ``registry.json`` and forkd packs (v1 base, v2 chain) built from
stored layers, cached, and marked when damaged content makes a build fail. Reads chains through
``read.lineage``."""
