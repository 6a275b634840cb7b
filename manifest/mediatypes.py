"""Media types, annotation keys and file roles: the constants of the format.

See docs/manifest-format.md for what each one names.
"""

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"

LAYER_ARTIFACT = "application/vnd.forkd.snapshot.layer.v1"
CHAIN_ARTIFACT = "application/vnd.forkd.snapshot.chain.v1"
CONFIG = "application/vnd.forkd.snapshot.config.v1+json"
CHUNK_MAP = "application/vnd.forkd.chunkmap.v1+json"
DATA_BLOB = "application/vnd.forkd.chunks.v1+zstd"
VMSTATE = "application/vnd.forkd.vmstate.v1+zstd"

ANNOTATION_FILE = "dev.forkd.file"
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_DESCRIPTION = "org.opencontainers.image.description"
ANNOTATION_BASE_IMAGE = "dev.forkd.base-image"
ANNOTATION_SOURCE = "org.opencontainers.image.source"
ANNOTATION_REVISION = "org.opencontainers.image.revision"
ANNOTATION_CHAIN_DEPTH = "dev.forkd.chain.depth"
ANNOTATION_LAYER_TAG = "dev.forkd.layer.tag"

MEMORY_FILE = "memory.bin"
VMSTATE_FILE = "vmstate"
ROOTFS_FILE = "rootfs.ext4"
#: Files that are cut into chunks and carried by chunk maps.
CHUNKED_FILES = (MEMORY_FILE, ROOTFS_FILE)
#: Every file role a layer may carry. Content never chooses a host path: names come from here.
FILE_ROLES = (VMSTATE_FILE, MEMORY_FILE, ROOTFS_FILE)

#: Compatibility metadata keys and their JSON types.
COMPAT_FIELDS: dict[str, type] = {
    "vmm": str,
    "vmmVersion": str,
    "machine": str,
    "accel": str,
    "arch": str,
    "cpu": str,
    "vcpus": int,
    "memMiB": int,
    "kernel": str,
}
