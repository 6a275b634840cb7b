"""The fleet: which hosts hold which bytes of a lineage, and where a snapshot restores fastest
(docs/placement.md).

``reports`` parses a host's inventory report (bounded, typed errors); ``inventory`` checks it
against the caller and the hub (identity, readable layers, partial summaries) and stores it;
``layerfacts`` reads what placement needs of a layer (its distinct chunk frames, per-file entries,
vmstate size), cached; ``fleetindex`` keeps every host's inventory in memory, reloaded by report
sequence; ``ranking`` is the pure arithmetic (a chain's chunk universe cut into atoms by the layers
the fleet holds, each host's missing bytes from them); ``hostcheck`` the compat and constraint
rules; ``placement`` the service the API calls, and ``kube`` its Kubernetes scheduler-extender face.
Reads chains through ``read.lineage``; never imports ``push`` or ``forkd``.
"""
