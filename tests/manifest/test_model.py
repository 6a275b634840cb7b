"""Parsing rejects malformed documents with an error that names the field; serialisation round-trips."""

import json

import pytest

from manifest import mediatypes as mt
from manifest.errors import InvalidManifest
from manifest.model import (
    ChunkEntry,
    ChunkMap,
    Descriptor,
    FileInfo,
    LayerConfig,
    LayerManifest,
    ParentRef,
    chain_index,
    manifest_digest,
)

D = "blake3:" + "1" * 64
E = "blake3:" + "2" * 64
S = "sha256:" + "7" * 64
S2 = "sha256:" + "8" * 64


def chunk_map(**over):
    obj = ChunkMap(
        "memory.bin", 10 * 65536, 65536, D, None, (S,), (ChunkEntry(1, D, 0, 0, 100), ChunkEntry(4, None))
    ).to_obj()
    obj.update(over)
    return json.dumps(obj).encode()


def test_chunk_map_round_trip():
    cm = ChunkMap.from_json(chunk_map())
    assert cm.entries == (ChunkEntry(1, D, 0, 0, 100), ChunkEntry(4, None))
    assert ChunkMap.from_json(cm.to_json()) == cm


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"mediaType": "x"}, "mediaType"),
        ({"file": "/etc/passwd"}, "not a chunked file role"),
        ({"file": "vmstate"}, "not a chunked file role"),
        ({"chunkSize": 1000}, "chunkSize"),
        ({"size": -1}, "size"),
        ({"compression": "gzip"}, "compression"),
        ({"blobs": ["nope"]}, r"blobs\[0\]"),
        ({"blobs": [S, S]}, "twice"),
        ({"blobs": [E]}, "sha256 digest"),
        ({"digest": S}, "blake3 digest"),
        ({"chunks": [[10, None]]}, "out of range"),
        ({"chunks": [[2, None], [2, None]]}, "strictly increasing"),
        ({"chunks": [[1, D, 1, 0, 10]]}, "blob 1"),
        ({"chunks": [[1, D, 0, 0, 0]]}, "positive"),
        ({"chunks": [[1, D, 0, 0, 10**9]]}, "length"),
        ({"chunks": [[1, D, 0, -5, 10]]}, "offset"),
        ({"chunks": [[1, "sha1:x", 0, 0, 10]]}, "digest"),
        ({"chunks": [[True, None]]}, "index"),
        ({"chunks": [[1, D]]}, r"\[index, null\]"),
        ({"chunks": [{"i": 1}]}, "must be"),
        ({"digest": None}, "digest is required"),
    ],
)
def test_chunk_map_rejects(over, fragment):
    with pytest.raises(InvalidManifest, match=fragment):
        ChunkMap.from_json(chunk_map(**over))


@pytest.mark.parametrize(
    "bad",
    [
        "blake3:" + "A" * 64,  # upper case
        "blake3:" + "1" * 63 + "\n",  # a newline where the batch check splits digests
        "blake3:" + "1" * 63,  # short, the others long enough to make up the length
        "sha256:" + "1" * 64,
        7,
    ],
)
def test_one_bad_digest_among_many_good_ones_is_named(bad):
    """Maps are parsed in bulk (one regex pass over every digest): a single bad digest in the
    middle still fails the map and is named by its entry."""
    chunks = [[i, D, 0, 100 * i, 100] for i in range(9)]
    chunks[5][1] = bad
    if bad == "blake3:" + "1" * 63:
        chunks[6][1] = D + "1"
    with pytest.raises(InvalidManifest, match=r"chunks\[5\]"):
        ChunkMap.from_json(chunk_map(chunks=chunks))


def test_a_large_map_parses_to_the_entries_it_lists():
    chunks = [[i, D if i % 2 else E, 0, 100 * i, 100] for i in range(10)]
    cm = ChunkMap.from_json(chunk_map(chunks=chunks))
    assert cm.entries == tuple(ChunkEntry(i, D if i % 2 else E, 0, 100 * i, 100) for i in range(10))


def test_documents_reject_non_json_and_oversize():
    with pytest.raises(InvalidManifest, match="not valid JSON"):
        ChunkMap.from_json(b"\xff{")
    with pytest.raises(InvalidManifest, match="JSON object"):
        LayerConfig.from_json(b"[]")
    with pytest.raises(InvalidManifest, match="over the"):
        LayerManifest.from_json(b" " * (2 << 20))


def config(**over):
    cfg = LayerConfig(
        "2026-11-29T00:00:00Z",
        {"vmstate": FileInfo(10, D, S), "memory.bin": FileInfo(65536, E, "sha256:" + "3" * 64, 65536)},
        ParentRef(S, "base"),
        {"vmm": "qemu-microvm", "memMiB": 256},
        {"k": "v"},
    )
    obj = cfg.to_obj()
    obj.update(over)
    return cfg, json.dumps(obj).encode()


def test_config_round_trip():
    cfg, data = config()
    assert LayerConfig.from_json(data) == cfg


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"files": {"memory.bin": {"size": 1, "digest": D, "sha256": S, "chunkSize": 65536}}}, "'vmstate'"),
        (
            {"files": {"vmstate": {"size": 1, "digest": D}, "memory.bin": {"size": 1, "digest": D}}},
            "sha256 is required",
        ),
        ({"parent": {"digest": D}}, "parent.digest must be a sha256"),
        ({"files": {"../../x": {"size": 1, "digest": D}}}, "unknown file role"),
        (
            {"files": {"vmstate": {"size": 1, "digest": D, "sha256": D}, "memory.bin": {"size": 1, "digest": D}}},
            "sha256 digest",
        ),
        ({"compat": {"memMiB": "256"}}, "compat.memMiB"),
        ({"compat": {"vcpus": True}}, "compat.vcpus"),
        ({"parent": {"tag": "x"}}, "parent.digest"),
        ({"annotations": {"a": 1}}, "annotations"),
        ({"created": 5}, "created"),
    ],
)
def test_config_rejects(over, fragment):
    _, data = config(**over)
    with pytest.raises(InvalidManifest, match=fragment):
        LayerConfig.from_json(data)


def manifest(layers=None):
    layers = layers or [
        Descriptor(mt.VMSTATE, S, 5),
        Descriptor(mt.CHUNK_MAP, S2, 7, {mt.ANNOTATION_FILE: "memory.bin"}),
        Descriptor(mt.DATA_BLOB, "sha256:" + "4" * 64, 9),
    ]
    return LayerManifest(Descriptor(mt.CONFIG, "sha256:" + "5" * 64, 3), tuple(layers))


def test_manifest_round_trip_and_digest_over_exact_bytes():
    m = manifest()
    data = m.to_json()
    assert LayerManifest.from_json(data) == m
    pretty = json.dumps(json.loads(data), indent=2).encode()
    assert LayerManifest.from_json(pretty) == m
    assert manifest_digest(pretty) != manifest_digest(data)
    assert manifest_digest(data).startswith("sha256:")


def test_format_version_1_documents_still_parse():
    """v1 (all blake3, file digest = blake3 of the bytes) is read, and written back unchanged."""
    m = LayerManifest(
        Descriptor(mt.CONFIG_V1, D, 3),
        (
            Descriptor(mt.VMSTATE_V1, D, 5),
            Descriptor(mt.CHUNK_MAP_V1, E, 7, {mt.ANNOTATION_FILE: "memory.bin"}),
            Descriptor(mt.DATA_BLOB_V1, "blake3:" + "4" * 64, 9),
        ),
        version=1,
    )
    data = m.to_json()
    assert json.loads(data)["artifactType"] == mt.LAYER_ARTIFACT_V1
    assert LayerManifest.from_json(data) == m and LayerManifest.from_json(data).version == 1
    cm = ChunkMap("memory.bin", 65536, 65536, D, None, (E,), (ChunkEntry(0, D, 0, 0, 100),), version=1)
    assert ChunkMap.from_json(cm.to_json()) == cm
    cfg = LayerConfig(
        "2026-11-29T00:00:00Z", {"vmstate": FileInfo(10, D), "memory.bin": FileInfo(65536, E)}, ParentRef(D), version=1
    )
    assert LayerConfig.from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda o: o.update(schemaVersion=1), "schemaVersion"),
        (lambda o: o.update(artifactType="application/vnd.oci.image.config.v1+json"), "artifactType"),
        (lambda o: o["config"].update(mediaType="x"), "config.mediaType"),
        (lambda o: o["layers"].pop(0), "exactly one vmstate"),
        (lambda o: o["layers"].pop(1), "chunk map for 'memory.bin'"),
        (lambda o: o["layers"].append(dict(o["layers"][2])), "twice"),
        (lambda o: o["layers"][1]["annotations"].update({mt.ANNOTATION_FILE: "/etc/shadow"}), "chunk map needs"),
        (
            lambda o: o["layers"].append(
                {"mediaType": "application/x-evil", "digest": "blake3:" + "6" * 64, "size": 1}
            ),
            "not a forkd",
        ),
        (lambda o: o["layers"][0].update(size=-1), "size"),
        (lambda o: o["layers"][0].update(digest=D), "must be a sha256 digest"),
        (lambda o: o["layers"][0].update(mediaType=mt.VMSTATE_V1), "not a forkd layer blob type of format version 2"),
        (lambda o: o.update(layers={}), "layers has the wrong type"),
    ],
)
def test_manifest_rejects(mutate, fragment):
    obj = manifest().to_obj()
    mutate(obj)
    with pytest.raises(InvalidManifest, match=fragment):
        LayerManifest.from_json(json.dumps(obj).encode())


def test_chain_index_lists_base_to_head():
    descs = [
        Descriptor(mt.OCI_MANIFEST, D, 10, artifact_type=mt.LAYER_ARTIFACT),
        Descriptor(mt.OCI_MANIFEST, E, 11, artifact_type=mt.LAYER_ARTIFACT),
    ]
    obj = json.loads(chain_index(descs))
    assert [m["digest"] for m in obj["manifests"]] == [D, E]
    assert obj["annotations"][mt.ANNOTATION_CHAIN_DEPTH] == "2"


def test_config_forkd_object_round_trips_and_refuses_derived_fields():
    """``forkd``: snapshot.json fields a pull cannot derive, verbatim (docs/manifest-format.md §5)."""
    base = {
        "mediaType": mt.CONFIG,
        "created": "2026-11-29T12:00:00Z",
        "parent": None,
        "compat": {},
        "files": {
            "vmstate": {"size": 1, "digest": "blake3:" + "a" * 64, "sha256": S},
            "memory.bin": {"size": 1, "digest": "blake3:" + "b" * 64, "sha256": S2, "chunkSize": 65536},
        },
        "annotations": {},
    }
    carried = {"volumes": [{"host_path": "/v.img", "guest_path": "/opt", "read_only": False}], "x": {"y": [1]}}
    config = LayerConfig.from_json(json.dumps({**base, "forkd": carried}).encode())
    assert config.forkd == carried and json.loads(config.to_json())["forkd"] == carried
    assert "forkd" not in json.loads(LayerConfig.from_json(json.dumps(base).encode()).to_json())
    for bad in (
        {"vmstate": "x"},
        {"memory": "x"},
        {"parent_tag": "x"},
        {"parent_content_hash": "x"},
        {"volumes": {}},
        {"volumes": [{"host_path": "/a"}]},
        {"volumes": [{"host_path": "/a", "guest_path": "/b", "read_only": "no"}]},
        {"rootfs": 3},
    ):  # what forkd's serde Snapshot could not parse, or what an install derives
        with pytest.raises(InvalidManifest, match=r"config.forkd"):
            LayerConfig.from_json(json.dumps({**base, "forkd": bad}).encode())


@pytest.mark.parametrize("parse", [LayerManifest.from_json, ChunkMap.from_json, LayerConfig.from_json])
def test_deeply_nested_document_is_invalid_manifest(parse):
    """Issue 16 item 5: nesting the parser cannot follow is an InvalidManifest, not a RecursionError."""
    with pytest.raises(InvalidManifest, match="nested too deeply"):
        parse(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")


def test_a_config_forkd_object_nested_too_deeply_is_refused():
    """Issue 16 item 5: a free-form object the client writes back out as snapshot.json is depth-bounded."""
    base = {
        "mediaType": mt.CONFIG,
        "created": "2026-11-29T12:00:00Z",
        "parent": None,
        "compat": {},
        "files": {
            "vmstate": {"size": 1, "digest": "blake3:" + "a" * 64, "sha256": "sha256:" + "c" * 64},
            "memory.bin": {
                "size": 1,
                "digest": "blake3:" + "b" * 64,
                "sha256": "sha256:" + "d" * 64,
                "chunkSize": 65536,
            },
        },
        "annotations": {},
    }
    deep: dict = {}
    cursor = deep
    for _ in range(800):  # parses, but json.dumps from a deeper stack would raise RecursionError
        cursor["a"] = {}
        cursor = cursor["a"]
    with pytest.raises(InvalidManifest, match=r"config.forkd is nested deeper than 32 levels"):
        LayerConfig.from_json(json.dumps({**base, "forkd": {"x": deep}}).encode())
    ok = {"volumes": [{"host_path": "/v.img", "guest_path": "/opt"}]}
    assert LayerConfig.from_json(json.dumps({**base, "forkd": ok}).encode()).forkd == ok
