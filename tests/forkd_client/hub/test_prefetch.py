"""Every link's chunk maps and vmstate are asked for before the first link's data, not link by link."""

from __future__ import annotations

import threading

import httpx
import pytest

from forkd_client.hub import pull as pull_module
from forkd_client.hub.client import HubClient
from forkd_client.hub.lazystate import open_index
from forkd_client.hub.pull import pull
from forkd_client.hub.pullstages import parse_link
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from .hubproxy import proxy


def _recording(inproc_hub, token: str) -> tuple[HubClient, list[tuple[str, bool]]]:
    """A client whose blob GETs are recorded in order: (digest, a range GET?)."""
    asked: list[tuple[str, bool]] = []

    def record(request: httpx.Request) -> None:
        path = request.url.path
        if request.method == "GET" and "/blobs/" in path and "/uploads/" not in path:
            asked.append((path.rsplit("/", 1)[1], "range" in request.headers))

    return HubClient("http://hub.test", token, http=proxy(inproc_hub, record)), asked


def _small_blobs(inproc_hub, token: str, ref: Reference) -> list[tuple[list[str], str]]:
    """Per link, base first: its chunk maps' digests and its vmstate's digest."""
    chain = [parse_link(link) for link in inproc_hub.client(token).repository(ref.name).get_chain(ref.ref)]
    return [([d.digest for d in m.chunk_maps.values()], m.vmstate.digest) for _, m, _ in chain]


def test_every_links_maps_and_vmstate_come_before_the_first_data_range(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    client, asked = _recording(inproc_hub, token)

    pull(other_store, client, ref, as_tag="py")

    first_range = next(i for i, (_, ranged) in enumerate(asked) if ranged)
    before = {digest for digest, ranged in asked[:first_range] if not ranged}
    for maps, vmstate in _small_blobs(inproc_hub, token, ref):
        assert set(maps) <= before, "a link's chunk maps were fetched after the first link's data"
        assert vmstate in before, "a link's vmstate was fetched after the first link's data"


def test_a_held_base_has_its_maps_fetched_but_not_its_vmstate(chain3, other_store, inproc_hub):
    """The base is already installed: its chunk maps are needed (the parent's chunk lists), its
    vmstate is not; an up-to-date pull asks for no blob at all."""
    token = inproc_hub.token("ci", "push:acme/*")
    base_ref, ref = Reference.parse("acme/base:v1"), Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "base", base_ref)
    push(chain3, inproc_hub.client(token), "head", ref)
    pull(other_store, inproc_hub.client(token), base_ref, as_tag="base")
    client, asked = _recording(inproc_hub, token)

    result = pull(other_store, client, ref, as_tag="py")

    assert [link.reused for link in result.links] == [True, False, False]
    (base_maps, base_vmstate), *_ = _small_blobs(inproc_hub, token, ref)
    digests = [digest for digest, _ in asked]
    assert set(base_maps) <= set(digests)
    assert base_vmstate not in digests

    client, asked = _recording(inproc_hub, token)
    assert pull(other_store, client, ref, as_tag="py").up_to_date
    assert asked == []


def test_the_links_are_asked_for_before_the_local_index_opens(chain3, other_store, inproc_hub, monkeypatch):
    """The prefetch starts first, so the hub answers while the local index opens: opening it waits
    here (up to 10 s) for a blob GET, which comes only if the prefetch was started before it."""
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    asked_one = threading.Event()
    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, lambda request: _note_blob(request, asked_one)))
    seen: list[bool] = []

    def open_index_after_a_request(store, head_digest):
        seen.append(asked_one.wait(timeout=10))
        return open_index(store, head_digest)

    monkeypatch.setattr(pull_module, "open_index", open_index_after_a_request)
    pull(other_store, client, ref, as_tag="py")
    assert seen == [True], "no link was asked for before the local index opened"


def test_an_index_that_cannot_open_fails_the_pull_cleanly_with_the_prefetch_started(
    chain3, other_store, inproc_hub, monkeypatch
):
    """The prefetch is already running when the local index fails to open (a full or unreadable
    disk): the pull raises that error, installs nothing, and leaves no prefetch thread behind."""
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)

    def unreadable(store, head_digest):
        raise PermissionError(13, "Permission denied", str(store.root / "chunk-index.db"))

    monkeypatch.setattr(pull_module, "open_index", unreadable)
    with pytest.raises(PermissionError, match=r"chunk-index\.db"):
        pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    assert other_store.tags() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("forkd-prefetch") and t.is_alive()]

    monkeypatch.undo()  # and the next pull, with the index back, installs the chain
    assert [link.reused for link in pull(other_store, inproc_hub.client(token), ref, as_tag="py").links] == [
        False,
        False,
        False,
    ]


def _note_blob(request: httpx.Request, event: threading.Event) -> None:
    if request.method == "GET" and "/blobs/" in request.url.path and "/uploads/" not in request.url.path:
        event.set()
