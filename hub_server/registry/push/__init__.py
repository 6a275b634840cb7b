"""Everything a push checks before it is accepted: upload sessions (bytes staged, verified, published),
recipes of frames stored once in packs (verified as they stream in), frame negotiation, and manifests
(forkd layers and chain indexes through ``verify.py``, any other OCI content through ``oci_content.py``),
committed in one transaction. Imports ``content`` and ``core``, never ``read``."""
