"""The node agent: what this host holds, told to a hub so it can place snapshots where they restore fastest
(docs/placement.md).

``inventory`` reads the local store: the layers held whole (snapshots pulled from the hub, files
unchanged) and in part (an interrupted pull's staged files, a lazy session's staged image), each
partial layer as a chunk bitmap; ``facts`` the host's facts (free disk and memory, the VMMs it can
restore with, arch, load, labels, download rate); ``report`` sends them, incrementally, and keeps what
the hub acknowledged in ``<store>/node/state.json``; ``agent`` is ``forkd node serve``, one process per
store running services on one event loop (the reporter now; the peer chunk server of the next issue
is another service on the same loop). Builds on ``forkd_client.hub``; never imports the CLI or ``lazy``.
"""
