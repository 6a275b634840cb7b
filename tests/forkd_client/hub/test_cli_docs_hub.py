"""The push/pull/remote-inspect JSON examples in docs/cli.md have exactly the keys the real results carry."""

from __future__ import annotations

from forkd_client.cli.inspect_remote import remote_inspection
from forkd_client.hub.provenance import attach_provenance, ci_annotations
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from ..test_cli_docs import examples

GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": "0" * 40,
    "GITHUB_REPOSITORY": "acme/envs",
    "GITHUB_RUN_ID": "1",
    "GITHUB_WORKFLOW": "nightly",
    "RUNNER_NAME": "runner-7",
}


def test_push_pull_and_remote_inspect_examples_match(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    result = push(chain3, inproc_hub.client(token), "head", ref)
    result.provenance = attach_provenance(
        inproc_hub.client(token).repository(ref.name),
        result.tag,
        [link.digest for link in result.links],
        annotations=ci_annotations(GITHUB),
        user_annotations={},
        started="2026-12-01T03:10:40Z",
        forkd_version="0",
    )
    pushed = result.to_obj()
    pulled = pull(other_store, inproc_hub.client(token), ref, as_tag="py").to_obj()
    inspected = remote_inspection(inproc_hub.client(token), ref)
    docs = examples()
    for doc, real in ((docs["push"], pushed), (docs["pull"], pulled), (docs["inspect_remote"], inspected)):
        assert set(doc) == set(real)
    for doc, real in ((docs["push"], pushed), (docs["pull"], pulled)):
        assert set(doc["links"][0]) == set(real["links"][0])
    assert set(docs["push"]["provenance"]) == set(pushed["provenance"])
    assert set(docs["push"]["provenance"]["annotations"]) == set(pushed["provenance"]["annotations"])
    doc, real = docs["inspect_remote"], inspected
    # issue 30: a remote inspect shows size, chain and what the layer runs on
    assert set(doc["size"]) == set(real["size"]) == {"logicalSize", "storedSize", "sharedWithParent"}
    assert len(real["chain"]) == 2 and set(doc["chain"][0]) == set(real["chain"][0])  # base, mid; head is the ref
    assert real["runs_on"] == other_store.get("py").compat  # the layer config's compat, as pulled
    assert real["size"]["logicalSize"] > 0 and real["size"]["storedSize"] > 0
    assert set(doc["referrers"][0]) == set(real["referrers"][0])
    assert set(doc["provenance"][0]) == set(real["provenance"][0])
    doc_statement, real_statement = doc["provenance"][0]["statement"], real["provenance"][0]["statement"]
    assert set(doc_statement) == set(real_statement)
    assert set(doc_statement["predicate"]["buildDefinition"]) == set(real_statement["predicate"]["buildDefinition"])
    assert set(doc_statement["predicate"]["runDetails"]) == set(real_statement["predicate"]["runDetails"])
