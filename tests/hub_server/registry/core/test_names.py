"""Repository names, tags, digests and references."""

from __future__ import annotations

import pytest

from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.names import (
    Reference,
    check_digest,
    check_repository,
    check_tag,
    parse_digest,
    parse_reference,
)
from manifest.digest import Digest


@pytest.mark.parametrize(("ns", "name"), [("acme", "py-base"), ("a1", "x.y_z"), ("a" * 64, "b")])
def test_valid_repository_names(ns, name):
    assert check_repository(ns, name) == f"{ns}/{name}"


@pytest.mark.parametrize(
    ("ns", "name"),
    [("Acme", "x"), ("acme", "-x"), ("acme", "x--"), ("a" * 65, "b"), ("acme", ""), ("ac me", "x"), ("acme", "x..y")],
)
def test_invalid_repository_names(ns, name):
    with pytest.raises(HubError) as e:
        check_repository(ns, name)
    assert e.value.code == "NAME_INVALID"


def test_references():
    assert parse_reference("v1.2_rc-1") == Reference(tag="v1.2_rc-1")
    digest = "sha256:" + "0" * 64
    assert parse_reference(digest) == Reference(digest=digest)
    for bad, code in (("-v1", "NAME_INVALID"), ("x" * 129, "NAME_INVALID"), ("sha256:zz", "DIGEST_INVALID")):
        with pytest.raises(HubError) as e:
            parse_reference(bad)
        assert e.value.code == code
    assert check_tag("_" + "a" * 127)


def test_parse_digest_gives_the_digest_value_or_a_digest_invalid_error() -> None:
    value = parse_digest("sha256:" + "a" * 64)
    assert isinstance(value, Digest) and value.algorithm == "sha256" and check_digest(str(value)) == str(value)
    with pytest.raises(HubError) as caught:
        parse_digest("sha256:short")
    assert caught.value.code is ErrorCode.DIGEST_INVALID and caught.value.detail == {"digest": "sha256:short"}
