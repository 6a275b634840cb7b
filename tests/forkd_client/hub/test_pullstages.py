"""The stateless stages of a pull (forkd_client/hub/pullstages.py): naming the head's local tag
and refusing a link whose config is not the one its manifest names."""

import json

import pytest

from forkd_client.hub.client import ChainLink
from forkd_client.hub.errors import HubError
from forkd_client.hub.pullstages import head_tag_for, local_tag_for, parse_link
from forkd_client.hub.reference import Reference

DIGEST = "sha256:" + "ab12" * 16


@pytest.mark.parametrize(
    ("text", "as_tag", "expected"),
    [
        ("team/py", None, "py"),
        ("team/py:latest", None, "py"),
        ("team/py:3.12", None, "py-3-12"),
        (f"team/py@{DIGEST}", None, "py-ab12ab12ab12"),
        ("team/py:3.12", "mine", "mine"),
    ],
)
def test_the_head_tag_comes_from_as_tag_else_the_repository_tag_or_digest(text, as_tag, expected):
    assert head_tag_for(Reference.parse(text), as_tag) == expected


def test_a_local_tag_is_sanitised_and_bounded():
    assert local_tag_for("a/b c") == "a-b-c"
    assert local_tag_for("///") == "snapshot"
    assert len(local_tag_for("x" * 100)) == 64


def test_a_link_that_is_not_a_layer_is_a_hub_error_naming_it():
    link = ChainLink(DIGEST, json.dumps({"not": "a manifest"}).encode(), b"{}", "team/py", ())
    with pytest.raises(HubError, match=f"layer {DIGEST} is not a valid forkd snapshot layer"):
        parse_link(link)
