"""Lazy fork (``forkd fork REF --lazy``): children start from a hub chain before it has finished
downloading. See docs/lazy-fork.md.

- :mod:`.plan`: where each chunk of the head's memory image comes from; coalesced requests;
- :mod:`.image`: the staged image + present-bitmap, filled on demand, verified chunk by chunk;
- :mod:`.fusefs`: the read-only FUSE file the VMM maps;
- :mod:`.session`: resolve + verify like a pull, stage, mount, fill, install through ChainPull;
- ``hub/lazystate.py`` (below this package): what a session leaves on disk, read by a later pull (resume);
- :mod:`.fork`: the children; :mod:`.errors`: the error types.

The package imports nothing on its own (the rest loads libfuse; ``forkd pull`` reads a session's staged image through ``hub/lazystate.py``).
"""
