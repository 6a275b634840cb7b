"""The push/pull JSON examples in docs/cli.md have exactly the keys the real results carry."""

from __future__ import annotations

from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from ..test_cli_docs import examples


def test_push_and_pull_examples_match(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    pushed = push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1")).to_obj()
    pulled = pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py").to_obj()
    docs = examples()
    for doc, real in ((docs["push"], pushed), (docs["pull"], pulled)):
        assert set(doc) == set(real)
        assert set(doc["links"][0]) == set(real["links"][0])
