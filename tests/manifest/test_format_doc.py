"""Every JSON example in docs/manifest-format.md is parsed and validated by the code."""

import hashlib
import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from manifest import mediatypes as mt
from manifest.model import ChunkMap, Descriptor, LayerConfig, LayerManifest
from manifest.signature import (
    EMPTY_CONFIG,
    SIGNATURE_ARTIFACT,
    envelope_digest_of,
    verify_envelope,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "manifest-format.md"
BLOCK = re.compile(r"<!-- example: (?P<kind>[\w-]+) -->\s*```json\n(?P<body>.*?)```", re.S)


def examples():
    text = DOC.read_text()
    found = [(m["kind"], m["body"]) for m in BLOCK.finditer(text)]
    assert len(found) == text.count("```json"), "every json block in the spec needs an <!-- example: kind --> marker"
    return found


def test_doc_has_all_kinds():
    assert {k for k, _ in examples()} == {
        "chunkmap",
        "config",
        "manifest",
        "chain-index",
        "signature",
        "signature-envelope",
    }


@pytest.mark.parametrize(("kind", "body"), examples(), ids=[k for k, _ in examples()])
def test_example_is_valid(kind, body):
    data = body.encode()
    if kind == "chunkmap":
        cm = ChunkMap.from_json(data)
        assert cm.entries[1].is_zero and cm.entries[2].blob == 1
        assert json.loads(cm.to_json()) == json.loads(data)
    elif kind == "config":
        cfg = LayerConfig.from_json(data)
        assert cfg.parent and cfg.parent.tag == "py-base"
        assert cfg.forkd and cfg.forkd["volumes"][0]["guest_path"] == "/opt/cache"
        assert json.loads(cfg.to_json()) == json.loads(data)
    elif kind == "manifest":
        m = LayerManifest.from_json(data)
        assert set(m.chunk_maps) == {"memory.bin"} and len(m.data_blobs) == 2
        assert json.loads(m.to_json()) == json.loads(data)
    elif kind == "signature":
        obj = json.loads(data)
        assert obj["artifactType"] == obj["layers"][0]["mediaType"] == SIGNATURE_ARTIFACT
        assert obj["config"] == EMPTY_CONFIG
        assert envelope_digest_of(data, obj["subject"]["digest"]) == obj["layers"][0]["digest"]
    elif kind == "signature-envelope":
        signature = json.loads(dict(examples())["signature"])
        assert "sha256:" + hashlib.sha256(data.strip()).hexdigest() == signature["layers"][0]["digest"]
        assert len(data.strip()) == signature["layers"][0]["size"]
        key = Ed25519PrivateKey.from_private_bytes(bytes(range(32))).public_key()
        assert (
            verify_envelope(data.strip(), signature["subject"]["digest"], "team/python", [key])
            == signature["annotations"]["dev.forkd.signature.key"]
        )
    else:
        obj = json.loads(data)
        assert obj["mediaType"] == mt.OCI_INDEX and obj["artifactType"] == mt.CHAIN_ARTIFACT
        for i, d in enumerate(obj["manifests"]):
            assert Descriptor.from_obj(d, f"manifests[{i}]").artifact_type == mt.LAYER_ARTIFACT
        assert obj["annotations"][mt.ANNOTATION_CHAIN_DEPTH] == str(len(obj["manifests"]))


def test_examples_are_format_version_2():
    kinds = dict(examples())
    assert ChunkMap.from_json(kinds["chunkmap"].encode()).version == 2
    assert LayerConfig.from_json(kinds["config"].encode()).version == 2
    assert LayerManifest.from_json(kinds["manifest"].encode()).version == 2


def test_chunk_tree_test_vector_is_what_the_code_computes(tmp_path):
    """§2's test vector, recomputed from the file it describes."""
    import blake3

    from manifest.chunktree import ChunkList, file_chunk_tree

    text = DOC.read_text()
    block = re.search(r"<!-- test-vector: chunktree -->\s*```\n(.*?)```", text, re.S).group(1)
    values = dict(
        line.split("=", 1)[0].strip() and (line.split("=")[0].strip(), line.split("=")[-1].strip())
        for line in block.strip().splitlines()
    )
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.truncate(200000)
        f.write(b"a" * 65536)
        f.seek(3 * 65536)
        f.write(b"b" * 3392)
    assert values["d[0]"] == blake3.blake3(b"a" * 65536).hexdigest()
    assert values["d[1]"] == "0" * 64
    assert values["d[3]"] == blake3.blake3(b"b" * 3392).hexdigest()
    assert values["digest"] == file_chunk_tree(path, 65536)
    assert ChunkList(0, 65536).digest() in text
