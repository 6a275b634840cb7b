"""forkd_client/images/reference.py: image source strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkd_client.errors import UsageError
from forkd_client.images.errors import InvalidImageReference
from forkd_client.images.reference import DockerArchiveRef, OciLayoutRef, RegistryRef, parse_image_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("oci:/srv/img", OciLayoutRef(Path("/srv/img"))),
        ("oci:rel/dir:v1.2", OciLayoutRef(Path("rel/dir"), "v1.2")),
        ("oci:/srv/img:my/ref:with-colon", OciLayoutRef(Path("/srv/img"), "my/ref:with-colon")),
        (f"oci:/srv/img@{DIGEST}", OciLayoutRef(Path("/srv/img"), None, DIGEST)),
        ("docker-archive:/tmp/a:b.tar", DockerArchiveRef(Path("/tmp/a:b.tar"))),
        ("127.0.0.1:5000/ns/repo:tag", RegistryRef("127.0.0.1:5000", "ns/repo", "tag")),
        ("docker://localhost/a/b/c", RegistryRef("localhost", "a/b/c")),
        (f"hub.example.com/ns/repo:v1@{DIGEST}", RegistryRef("hub.example.com", "ns/repo", "v1", DIGEST)),
        ("[::1]:8080/library/python", RegistryRef("[::1]:8080", "library/python")),
        ("reg.io/a__b/c-d.e", RegistryRef("reg.io", "a__b/c-d.e")),
    ],
)
def test_parses(text, expected):
    assert parse_image_reference(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "want oci:DIR"),
        ("python:3.11", "name the registry"),
        ("library/python", "name the registry"),
        ("oci:", "needs a DIR"),
        ("oci::tag", "needs a DIR"),
        ("oci:/d@sha256:short", "not sha256"),
        ("oci:/d:bad tag!", "not a valid layout ref name"),
        ("docker-archive:", "needs a FILE"),
        ("reg.io/UPPER/case", "lowercase"),
        ("reg.io/ns/repo:-bad", "bad tag"),
        ("reg.io/ns/repo@sha512:" + "a" * 128, "not a digest"),
        ("bad_host.io:99999999/a", "bad registry host"),
        ("reg.io/a b", "spaces"),
    ],
)
def test_malformed_references_are_usage_errors_naming_the_problem(text, match):
    with pytest.raises(InvalidImageReference, match=match) as caught:
        parse_image_reference(text)
    assert isinstance(caught.value, UsageError)


def test_plain_http_only_for_loopback_and_named_insecure_hosts(monkeypatch):
    monkeypatch.delenv("FORKD_INSECURE_REGISTRIES", raising=False)
    assert RegistryRef("127.0.0.2:5000", "a").base_url() == "http://127.0.0.2:5000"
    assert RegistryRef("localhost", "a").base_url() == "http://localhost"
    assert RegistryRef("[::1]:80", "a").base_url() == "http://[::1]:80"
    assert RegistryRef("10.0.0.1:5000", "a").base_url() == "https://10.0.0.1:5000"
    assert RegistryRef("127.example.com", "a").base_url() == "https://127.example.com"
    monkeypatch.setenv("FORKD_INSECURE_REGISTRIES", "10.0.0.1:5000, lan.example")
    assert RegistryRef("10.0.0.1:5000", "a").base_url() == "http://10.0.0.1:5000"
    assert RegistryRef("lan.example:443", "a").base_url() == "http://lan.example:443"
    assert RegistryRef("other.example", "a").base_url() == "https://other.example"


def test_names_recorded_as_provenance(tmp_path):
    assert parse_image_reference("reg.io/ns/repo").name == "reg.io/ns/repo:latest"
    assert parse_image_reference(f"reg.io/ns/repo@{DIGEST}").name == f"reg.io/ns/repo@{DIGEST}"
    assert parse_image_reference("oci:rel:v1").name == f"oci:{Path('rel').absolute()}:v1"
