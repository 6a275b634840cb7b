"""Media types, annotation keys and file roles: the constants of the format.

See docs/manifest-format.md for what each one names.
"""

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"

#: The format version writers produce (docs/manifest-format.md). Readers accept 1 and 2.
FORMAT_VERSION = 2

LAYER_ARTIFACT = "application/vnd.forkd.snapshot.layer.v2"
CHAIN_ARTIFACT = "application/vnd.forkd.snapshot.chain.v1"
CONFIG = "application/vnd.forkd.snapshot.config.v2+json"
CHUNK_MAP = "application/vnd.forkd.chunkmap.v2+json"
DATA_BLOB = "application/vnd.forkd.chunks.v2+zstd"
VMSTATE = "application/vnd.forkd.vmstate.v2+zstd"
#: The native push of a data blob as a recipe over frames (docs/http-api.md).
RECIPE = "application/vnd.forkd.recipe.v1+json"
#: A hub's answer to a blob GET saying where a recipe blob's bytes live in the object store
#: (presigned pack ranges; docs/http-api.md, "Fetch plans").
BLOB_PLAN = "application/vnd.forkd.blob-plan.v1+json"

#: Format version 1 (read only): every digest was blake3, a file digest the blake3 of its bytes,
#: and chunk maps could point into data blobs of other layers.
LAYER_ARTIFACT_V1 = "application/vnd.forkd.snapshot.layer.v1"
CONFIG_V1 = "application/vnd.forkd.snapshot.config.v1+json"
CHUNK_MAP_V1 = "application/vnd.forkd.chunkmap.v1+json"
DATA_BLOB_V1 = "application/vnd.forkd.chunks.v1+zstd"
VMSTATE_V1 = "application/vnd.forkd.vmstate.v1+zstd"

#: format version → the media types of that version.
VERSIONS: dict[int, dict[str, str]] = {
    1: {
        "layer": LAYER_ARTIFACT_V1,
        "config": CONFIG_V1,
        "chunkmap": CHUNK_MAP_V1,
        "data": DATA_BLOB_V1,
        "vmstate": VMSTATE_V1,
    },
    2: {"layer": LAYER_ARTIFACT, "config": CONFIG, "chunkmap": CHUNK_MAP, "data": DATA_BLOB, "vmstate": VMSTATE},
}
LAYER_ARTIFACTS = (LAYER_ARTIFACT, LAYER_ARTIFACT_V1)
DATA_BLOBS = (DATA_BLOB, DATA_BLOB_V1)
CHUNK_MAPS = (CHUNK_MAP, CHUNK_MAP_V1)
CONFIGS = (CONFIG, CONFIG_V1)
VMSTATES = (VMSTATE, VMSTATE_V1)


def version_of(media_type: str | None, kind: str) -> int | None:
    """The format version whose ``kind`` (layer, config, chunkmap, data, vmstate) media type is
    ``media_type``, or None when it is none of ours."""
    for version, types in VERSIONS.items():
        if types[kind] == media_type:
            return version
    return None


def is_layer(artifact_type: str | None) -> bool:
    """Whether an ``artifactType`` names a forkd snapshot layer (any format version)."""
    return artifact_type in LAYER_ARTIFACTS


ANNOTATION_FILE = "dev.forkd.file"
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_DESCRIPTION = "org.opencontainers.image.description"
ANNOTATION_BASE_IMAGE = "dev.forkd.base-image"
ANNOTATION_SOURCE = "org.opencontainers.image.source"
ANNOTATION_REVISION = "org.opencontainers.image.revision"
ANNOTATION_CHAIN_DEPTH = "dev.forkd.chain.depth"
ANNOTATION_LAYER_TAG = "dev.forkd.layer.tag"
#: a layer config's: the sha256 (``sha256:<hex>``) and size (decimal) of the image its ``forkd.rootfs`` names
#: outside the snapshot directory (not uploaded); the hub's forkd pack declares it as forkd's ``[rootfs]``
ANNOTATION_ROOTFS_SHA256 = "dev.forkd.rootfs.sha256"
ANNOTATION_ROOTFS_SIZE = "dev.forkd.rootfs.size"

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
