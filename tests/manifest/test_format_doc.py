"""Every JSON example in docs/manifest-format.md is parsed and validated by the code."""

import json
import re
from pathlib import Path

import pytest

from manifest import mediatypes as mt
from manifest.model import ChunkMap, Descriptor, LayerConfig, LayerManifest

DOC = Path(__file__).resolve().parents[2] / "docs" / "manifest-format.md"
BLOCK = re.compile(r"<!-- example: (?P<kind>[\w-]+) -->\s*```json\n(?P<body>.*?)```", re.S)


def examples():
    text = DOC.read_text()
    found = [(m["kind"], m["body"]) for m in BLOCK.finditer(text)]
    assert len(found) == text.count("```json"), "every json block in the spec needs an <!-- example: kind --> marker"
    return found


def test_doc_has_all_kinds():
    assert {k for k, _ in examples()} == {"chunkmap", "config", "manifest", "chain-index"}


@pytest.mark.parametrize("kind, body", examples(), ids=[k for k, _ in examples()])
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
    else:
        obj = json.loads(data)
        assert obj["mediaType"] == mt.OCI_INDEX and obj["artifactType"] == mt.CHAIN_ARTIFACT
        for i, d in enumerate(obj["manifests"]):
            assert Descriptor.from_obj(d, f"manifests[{i}]").artifact_type == mt.LAYER_ARTIFACT
        assert obj["annotations"][mt.ANNOTATION_CHAIN_DEPTH] == str(len(obj["manifests"]))
