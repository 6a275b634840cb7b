"""forkd_client/images/fetch.py, layout.py, manifests.py: resolving and downloading from ``oci:`` layouts
(the registry source is exercised against real registries in test_registry.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forkd_client.images.errors import (
    ImageDigestMismatch,
    ImageNotFound,
    LimitExceeded,
    MalformedImage,
    PlatformNotFound,
    UnsupportedImage,
)
from forkd_client.images.fetch import download, resolve
from forkd_client.images.layout import LayoutSource
from forkd_client.images.limits import DEFAULT_LIMITS
from forkd_client.images.reference import parse_image_reference
from tests.forkd_client.images.ocibuild import Entry, layer_tar, sha256, write_layout

LAYERS = [layer_tar([Entry.file("a", b"a")]), layer_tar([Entry.file("b", b"b" * 1000)])]


def fetch(text: str, work: Path, limits=DEFAULT_LIMITS):
    work.mkdir(exist_ok=True)
    return download(resolve(LayoutSource(parse_image_reference(text)), limits), work, limits=limits)


def blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


@pytest.mark.parametrize(
    ("media", "compression"), [("oci", "gzip"), ("oci", "zstd"), ("oci", "none"), ("docker", "gzip")]
)
def test_a_layout_image_is_fetched_and_verified(tmp_path, media, compression):
    info = write_layout(
        tmp_path / "oci", LAYERS, tag="v1", media=media, compression=compression, env=["A=1"], workdir="/srv"
    )
    progress = []
    work = tmp_path / "work"
    work.mkdir()
    image = download(
        resolve(LayoutSource(parse_image_reference(f"oci:{tmp_path / 'oci'}:v1")), DEFAULT_LIMITS),
        work,
        limits=DEFAULT_LIMITS,
        progress=lambda *a: progress.append(a),
    )
    assert image.manifest_digest == info.manifest_digest and image.index_digest is None
    assert [layer.digest for layer in image.layers] == info.layer_digests
    assert [layer.diff_id for layer in image.layers] == [sha256(t) for t in LAYERS]
    assert all(layer.path.read_bytes() == blob(tmp_path / "oci", layer.digest).read_bytes() for layer in image.layers)
    assert image.config.env == ["A=1"] and image.config.working_dir == "/srv" and image.config.cmd == ["/bin/sh"]
    total = sum(blob(tmp_path / "oci", d).stat().st_size for d in info.layer_digests)
    assert progress[-1] == ("download", total, total)


def test_an_index_resolves_to_linux_amd64(tmp_path):
    info = write_layout(
        tmp_path / "oci", LAYERS, tag="multi", platforms=[("linux", "arm64"), ("linux", "amd64"), ("windows", "amd64")]
    )
    image = fetch(f"oci:{tmp_path / 'oci'}:multi", tmp_path / "work")
    assert image.manifest_digest == info.manifest_digest and image.index_digest == info.top_digest
    assert image.config.architecture == "amd64"


def test_an_index_without_linux_amd64_names_what_it_has(tmp_path):
    write_layout(tmp_path / "oci", LAYERS, tag="arm", platforms=[("linux", "arm64"), ("linux", "s390x")])
    with pytest.raises(PlatformNotFound, match="linux/arm64, linux/s390x") as caught:
        fetch(f"oci:{tmp_path / 'oci'}:arm", tmp_path / "work")
    assert caught.value.platforms == ["linux/arm64", "linux/s390x"]


def test_a_single_manifest_for_another_platform_is_refused(tmp_path):
    write_layout(tmp_path / "oci", LAYERS, tag="arm", arch="arm64")
    with pytest.raises(PlatformNotFound, match="linux/arm64 image"):
        fetch(f"oci:{tmp_path / 'oci'}:arm", tmp_path / "work")


def test_a_corrupt_layer_is_refused_and_not_kept(tmp_path):
    info = write_layout(tmp_path / "oci", LAYERS, tag="v1")
    path = blob(tmp_path / "oci", info.layer_digests[1])
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ImageDigestMismatch, match=info.layer_digests[1]):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "work")
    assert sorted(os.listdir(tmp_path / "work")) == [info.layer_digests[0].replace(":", "-")]  # the good one only


def test_a_blob_longer_than_its_descriptor_is_refused(tmp_path):
    info = write_layout(tmp_path / "oci", LAYERS, tag="v1")
    with open(blob(tmp_path / "oci", info.layer_digests[0]), "ab") as f:
        f.write(b"extra")
    with pytest.raises(ImageDigestMismatch, match="more than"):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "work")


def test_a_corrupt_manifest_is_refused(tmp_path):
    info = write_layout(tmp_path / "oci", LAYERS, tag="v1")
    path = blob(tmp_path / "oci", info.manifest_digest)
    path.write_bytes(path.read_bytes().replace(b'"schemaVersion": 2', b'"schemaVersion":  2'))
    with pytest.raises(ImageDigestMismatch, match="manifest"):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "work")


def test_selection_by_tag_digest_or_the_only_image(tmp_path):
    layout = tmp_path / "oci"
    one = write_layout(layout, LAYERS[:1], tag="one")
    assert fetch(f"oci:{layout}", tmp_path / "w1").manifest_digest == one.manifest_digest
    two = write_layout(layout, LAYERS, tag="two")
    assert fetch(f"oci:{layout}:two", tmp_path / "w2").manifest_digest == two.manifest_digest
    assert fetch(f"oci:{layout}@{one.manifest_digest}", tmp_path / "w3").manifest_digest == one.manifest_digest
    with pytest.raises(ImageNotFound, match=r"holds 2 images.*one, two"):
        fetch(f"oci:{layout}", tmp_path / "w4")
    with pytest.raises(ImageNotFound, match=r"no image tagged 'three'.*one, two"):
        fetch(f"oci:{layout}:three", tmp_path / "w5")
    with pytest.raises(ImageNotFound, match="missing from the layout"):
        fetch(f"oci:{layout}@sha256:{'0' * 64}", tmp_path / "w6")


def test_missing_or_broken_layouts(tmp_path):
    with pytest.raises(ImageNotFound, match="not a directory"):
        fetch(f"oci:{tmp_path / 'nothing'}", tmp_path / "w")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ImageNotFound, match="no oci-layout"):
        fetch(f"oci:{tmp_path / 'plain'}", tmp_path / "w")
    info = write_layout(tmp_path / "oci", LAYERS, tag="v1")
    blob(tmp_path / "oci", info.layer_digests[0]).unlink()
    with pytest.raises(ImageNotFound, match="missing from the layout"):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "w2")


def _raw_manifest(layout: Path, tag: str, manifest: dict) -> None:
    data = json.dumps(manifest).encode()
    digest = sha256(data)
    blob(layout, digest).write_bytes(data)
    index = json.loads((layout / "index.json").read_text())
    index["manifests"].append(
        {
            "mediaType": manifest.get("mediaType", ""),
            "digest": digest,
            "size": len(data),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }
    )
    (layout / "index.json").write_text(json.dumps(index))


def test_artifacts_schema1_and_unknown_layer_types_are_unsupported(tmp_path):
    layout = tmp_path / "oci"
    info = write_layout(layout, LAYERS, tag="v1")
    config = {"mediaType": "application/vnd.forkd.snapshot.config.v2+json", "digest": info.config_digest, "size": 1}
    _raw_manifest(
        layout,
        "snap",
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.forkd.snapshot.layer.v2",
            "config": config,
            "layers": [],
        },
    )
    with pytest.raises(UnsupportedImage, match=r"not a container image.*forkd\.snapshot"):
        fetch(f"oci:{layout}:snap", tmp_path / "w1")
    _raw_manifest(layout, "old", {"schemaVersion": 1, "name": "x", "fsLayers": []})
    with pytest.raises(UnsupportedImage, match="schema 1"):
        fetch(f"oci:{layout}:old", tmp_path / "w2")
    good_config = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": info.config_digest, "size": 1}
    odd_layer = {"mediaType": "application/vnd.example.squashfs", "digest": info.layer_digests[0], "size": 1}
    _raw_manifest(
        layout,
        "odd",
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": good_config,
            "layers": [odd_layer],
        },
    )
    with pytest.raises(UnsupportedImage, match="not a tar layer"):
        fetch(f"oci:{layout}:odd", tmp_path / "w3")
    _raw_manifest(layout, "junk", {"schemaVersion": 2, "layers": "nope"})
    with pytest.raises(MalformedImage):
        fetch(f"oci:{layout}:junk", tmp_path / "w4")


def test_oversized_manifests_and_configs_are_refused_before_use(tmp_path):
    write_layout(tmp_path / "oci", LAYERS, tag="v1")
    with pytest.raises(LimitExceeded, match="max_manifest_bytes"):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "w1", DEFAULT_LIMITS.replace(max_manifest_bytes=100))
    with pytest.raises(LimitExceeded, match="max_config_bytes"):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "w2", DEFAULT_LIMITS.replace(max_config_bytes=100))
    with pytest.raises(LimitExceeded, match="max_layers"):
        fetch(f"oci:{tmp_path / 'oci'}:v1", tmp_path / "w3", DEFAULT_LIMITS.replace(max_layers=1))
