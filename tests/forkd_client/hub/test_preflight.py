"""Issue 16 item 11: a pull refuses what it can before transferring, uses the layers this host has, and on a
failure leaves only resumable state (which ``forkd prune`` clears)."""

from __future__ import annotations

import pytest

from forkd_client.errors import InvalidTag, SnapshotExists
from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.prune import prune

from ..snapshots import make_base_source
from .test_pull_integrity import _lying_push

REF = Reference.parse("acme/py:v1")


def staged(store) -> list[str]:
    return sorted(p.name for p in store.staging_root.iterdir()) if store.staging_root.exists() else []


def test_an_invalid_local_tag_is_refused_before_any_request(other_store):
    client = HubClient("http://127.0.0.1:9", None)  # nothing listens there: any request would fail differently
    with pytest.raises(InvalidTag):
        pull(other_store, client, REF, as_tag="../escape")
    assert client.bytes_received == 0 and staged(other_store) == []


def test_an_existing_local_tag_is_refused_before_any_chunk_moves(chain3, other_store, inproc_hub, tmp_path):
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(chain3, client, "head", REF)
    other_store.import_snapshot(make_base_source(tmp_path / "mine", seed=42), "py")
    before = client.bytes_received
    with pytest.raises(SnapshotExists, match=r"'py' already exists .* --as ANOTHER_TAG, or --force"):
        pull(other_store, client, REF, as_tag="py")
    assert client.bytes_received - before < 20_000  # the chain's manifests and configs, no chunks
    assert staged(other_store) == [] and other_store.tags() == ["py"]
    assert pull(other_store, client, REF, as_tag="py", force=True).digest  # --force replaces it


def test_pulling_what_this_host_just_pushed_transfers_no_chunk(chain3, inproc_hub):
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(chain3, client, "head", REF)
    junk = chain3.path("base").parent / "junk"  # an unrelated snapshot whose metadata does not read
    junk.mkdir()
    (junk / "snapshot.json").write_text("{not json")
    same_tag = pull(chain3, client, REF, as_tag="head")
    assert same_tag.up_to_date and chain3.tags() == ["base", "head", "junk", "mid"]

    other_tag = pull(chain3, client, REF, as_tag="py")
    assert [link.reused for link in other_tag.links] == [True, True, False]
    head = other_tag.links[-1]
    assert head.chunks_fetched == 0 and head.bytes_fetched == 0 and head.chunks_local > 0
    assert (chain3.path("py") / "memory.bin").read_bytes() == (chain3.path("head") / "memory.bin").read_bytes()
    assert chain3.get("py").parent_tag == "mid"  # built on the local parent, not a second copy of it
    assert len(chain3.verify_chain("py")) == 3


def test_a_failed_pull_leaves_only_resumable_state_and_prune_clears_it(chain3, other_store, inproc_hub, monkeypatch):
    token, _ = _lying_push(chain3, inproc_hub, monkeypatch, liar="mid")
    with pytest.raises(DigestInvalid):  # test_pull_integrity checks the message
        pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py")
    left = [p.name for p in other_store.staging_root.iterdir()]
    assert left and all(name.startswith("resume-pull-") for name in left), left
    assert sorted(prune(other_store).staging) == sorted(left)
    assert list(other_store.staging_root.iterdir()) == []
