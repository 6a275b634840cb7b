"""What the two command lines (``forkd`` and ``forkd-hub``) share; imports nothing of ours.

The import rules keep ``forkd_client`` and ``hub_server`` apart, and ``manifest`` is the format
library, so the pieces both CLIs need live here: :mod:`clikit.helpdoc` (the ``--help`` document
builder).
"""
