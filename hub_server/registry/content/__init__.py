"""What a repository holds, as every wing reads and writes it: blobs (stored whole or as recipes of
frames, read and planned), tags (resolve, move, list), the tag policies (immutable tags, retention
settings, required signatures) and damage marks. Imports only ``core``."""
