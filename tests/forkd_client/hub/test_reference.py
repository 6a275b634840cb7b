import pytest

from forkd_client.hub.errors import InvalidReference
from forkd_client.hub.reference import Reference

D = "blake3:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "host", "name", "tag", "digest", "ref"),
    [
        ("acme/py-base", None, "acme/py-base", None, None, "latest"),
        ("acme/py-base:v1.2", None, "acme/py-base", "v1.2", None, "v1.2"),
        ("127.0.0.1:8080/acme/py", "127.0.0.1:8080", "acme/py", None, None, "latest"),
        ("localhost/acme/py:x", "localhost", "acme/py", "x", None, "x"),
        (f"hub.example.com/a/b@{D}", "hub.example.com", "a/b", None, D, D),
        (f"a/b:t@{D}", None, "a/b", "t", D, D),
    ],
)
def test_parse(text, host, name, tag, digest, ref):
    r = Reference.parse(text)
    assert (r.host, r.name, r.tag, r.digest, r.ref) == (host, name, tag, digest, ref)
    assert str(r) == text


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("py-base", "namespace/repo"),
        ("a/b/c/d", "namespace/repo"),
        ("Acme/x", "namespace 'Acme'"),
        ("a/b:", "bad tag"),
        ("a/b:-x", "bad tag"),
        ("a/b@sha256:xyz", "not a digest"),
        ("a b/c", "expected"),
        ("", "expected"),
        ("a/" + "b" * 65, "repository"),
        ("bad_host!:80/a/b", "bad host"),
    ],
)
def test_parse_rejects(text, fragment):
    with pytest.raises(InvalidReference, match=fragment):
        Reference.parse(text)


@pytest.mark.parametrize("text", ["hub/acme/py", "myregistry/acme/py:v1", "Hub_1/acme/py"])
def test_a_first_component_is_a_host_only_with_a_dot_a_colon_or_localhost(text):
    """Issue 16 item 10 (docker's rule): 'hub/acme/py' is a three-part name, not host 'hub'."""
    first = text.split("/")[0]
    with pytest.raises(
        InvalidReference,
        match=rf"{first!r} is not a host \(a host has a '\.' or a ':' or is "
        r"'localhost'\); the name must be namespace/repo",
    ):
        Reference.parse(text)


def test_hub_url_choice():
    default = "http://127.0.0.1:8080"
    assert Reference.parse("a/b").hub_url(default) == default
    assert Reference.parse("127.0.0.1:8080/a/b").hub_url(default) == default
    assert Reference.parse("127.0.0.1:9999/a/b").hub_url(default) == "http://127.0.0.1:9999"
    assert Reference.parse("hub.example.com/a/b").hub_url(default) == "https://hub.example.com"
    with pytest.raises(InvalidReference, match="no hub given"):
        Reference.parse("a/b").hub_url(None)
