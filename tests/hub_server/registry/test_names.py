"""Repository names, tags, digests and references."""

from __future__ import annotations

import pytest

from hub_server.errors import HubError
from hub_server.registry.names import Reference, check_repository, check_tag, parse_reference


@pytest.mark.parametrize(("ns", "name"), [("acme", "py-base"), ("a1", "x.y_z"), ("a" * 64, "b")])
def test_valid_repository_names(ns, name):
    assert check_repository(ns, name) == f"{ns}/{name}"


@pytest.mark.parametrize(("ns", "name"), [("Acme", "x"), ("acme", "-x"), ("acme", "x--"), ("a" * 65, "b"),
                                          ("acme", ""), ("ac me", "x"), ("acme", "x..y")])
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
