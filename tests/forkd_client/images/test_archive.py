"""forkd_client/images/archive.py: docker-archive tarballs (hand-made, and written by real skopeo)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile

import pytest

from forkd_client.images.archive import fetch_archive
from forkd_client.images.errors import ImageDigestMismatch, ImageNotFound, UnsupportedImage
from forkd_client.images.limits import DEFAULT_LIMITS
from forkd_client.images.reference import DockerArchiveRef
from tests.forkd_client.images.ocibuild import (
    Entry,
    image_config,
    layer_tar,
    sha256,
    write_docker_archive,
    write_layout,
)

LAYERS = [
    layer_tar([Entry.dir("etc"), Entry.file("etc/os-release", b"ID=test\n")]),
    layer_tar([Entry.file("etc/motd", b"hi")]),
]


def test_a_docker_archive_is_read_and_verified_against_its_diff_ids(tmp_path):
    image_id = write_docker_archive(tmp_path / "a.tar", LAYERS, env=["B=2"])
    (tmp_path / "w").mkdir()
    image = fetch_archive(DockerArchiveRef(tmp_path / "a.tar"), tmp_path / "w", limits=DEFAULT_LIMITS)
    assert image.manifest_digest == image_id == image.config_digest
    assert [layer.path.read_bytes() for layer in image.layers] == LAYERS
    assert [layer.diff_id for layer in image.layers] == [sha256(t) for t in LAYERS]
    assert image.config.env == ["B=2"] and image.name == f"docker-archive:{tmp_path / 'a.tar'}"


def test_a_layer_that_does_not_match_its_diff_id_is_refused(tmp_path):
    config = image_config([sha256(LAYERS[0]), sha256(b"another layer")])
    write_docker_archive(tmp_path / "a.tar", LAYERS, config=config)
    (tmp_path / "w").mkdir()
    with pytest.raises(ImageDigestMismatch, match="layer"):
        fetch_archive(DockerArchiveRef(tmp_path / "a.tar"), tmp_path / "w", limits=DEFAULT_LIMITS)
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["layer-0"]


def test_archives_with_several_images_or_none_are_refused(tmp_path):
    write_docker_archive(tmp_path / "a.tar", LAYERS)
    with tarfile.open(tmp_path / "a.tar") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    with tarfile.open(tmp_path / "b.tar", "w") as out, tarfile.open(tmp_path / "a.tar") as tar:
        for member in tar:
            if member.name == "manifest.json":
                data = json.dumps(manifest * 2).encode()
                member.size = len(data)
                out.addfile(member, io.BytesIO(data))
            else:
                out.addfile(member, tar.extractfile(member))
    (tmp_path / "w").mkdir()
    with pytest.raises(UnsupportedImage, match="holds 2 images"):
        fetch_archive(DockerArchiveRef(tmp_path / "b.tar"), tmp_path / "w", limits=DEFAULT_LIMITS)
    with pytest.raises(ImageNotFound, match="no such file"):
        fetch_archive(DockerArchiveRef(tmp_path / "missing.tar"), tmp_path / "w", limits=DEFAULT_LIMITS)


@pytest.mark.integration  # skopeo writes the archive: a helper program (docs/testing.md)
@pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo (scripts/install-system-deps.sh)")
def test_an_archive_written_by_skopeo(tmp_path):
    write_layout(tmp_path / "oci", LAYERS, tag="v1", env=["FROM=skopeo"])
    result = subprocess.run(
        ["skopeo", "copy", f"oci:{tmp_path / 'oci'}:v1", f"docker-archive:{tmp_path / 'd.tar'}:example/app:v1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (tmp_path / "w").mkdir()
    image = fetch_archive(DockerArchiveRef(tmp_path / "d.tar"), tmp_path / "w", limits=DEFAULT_LIMITS)
    assert [layer.diff_id for layer in image.layers] == [sha256(t) for t in LAYERS]
    assert image.config.env == ["FROM=skopeo"]
