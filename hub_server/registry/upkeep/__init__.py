"""Keeping the store true over time: deletion (tags, manifests, blob links), retention, the
garbage collector and its marks, storage usage, and ``forkd-hub verify``'s scrub. Sits above every
other wing (GC prunes the forkd packs cached for deleted manifests)."""
