"""When a pull installs its links: while the next link fills (``fill_link``'s ``meanwhile``), base
first, a parent only once its child's files are whole; and what ends a fill there (an install's
error) still leaves every piece already queued written, for the next pull to resume."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import forkd_client.hub.pull as pull_module
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore

REF = Reference.parse("acme/py:v1")


def _push_chain3(chain3: SnapshotStore, inproc_hub) -> str:
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", REF)
    return token


def _wrap_head_fill(monkeypatch, chain3: SnapshotStore, around: Callable) -> None:
    """Replace the pull's ``fill_link`` so that the head link's fill runs through ``around(fill, args, meanwhile)``."""
    real = pull_module.fill_link
    head_tag = "py"

    def fill(*args, **kw):
        if args[2].tag != head_tag:  # fill_link(repo, index, link: LinkFiles, progress, pools, meanwhile, peers=…)
            return real(*args, **kw)
        return around(real, args, args[-1])

    monkeypatch.setattr(pull_module, "fill_link", fill)


def test_the_links_below_are_installed_while_the_head_fills(chain3, other_store, inproc_hub, monkeypatch):
    token = _push_chain3(chain3, inproc_hub)
    seen: dict[str, list[str]] = {}

    def around(real, args, meanwhile):
        assert meanwhile is not None  # an unsigned pull installs as it goes
        deadline = time.monotonic() + 30
        while "mid" not in other_store.tags() and time.monotonic() < deadline:
            meanwhile()  # what the fill calls whenever a request or piece is done
            time.sleep(0.01)
        seen["before the head's bytes"] = other_store.tags()
        return real(*args)

    _wrap_head_fill(monkeypatch, chain3, around)
    result = pull_module.pull(other_store, inproc_hub.client(token), REF, as_tag="py")
    assert seen["before the head's bytes"] == ["base", "mid"]  # the parent too: the head's files were whole
    assert [link.tag for link in result.links] == ["base", "mid", "py"]
    assert (other_store.path("py") / "memory.bin").read_bytes() == (chain3.path("head") / "memory.bin").read_bytes()
    assert other_store.get("py").parent_tag == "mid"


def test_a_signed_pull_installs_nothing_before_every_link_is_checked(chain3, other_store, inproc_hub, monkeypatch):
    """All or nothing: the fill gets no ``meanwhile`` when installs are deferred."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    token = inproc_hub.token("ci", "push:acme/*")
    key = Ed25519PrivateKey.generate()
    push(chain3, inproc_hub.client(token), "head", REF, sign=key)
    given: list[object] = []

    def around(real, args, meanwhile):
        given.append(meanwhile)
        return real(*args)

    _wrap_head_fill(monkeypatch, chain3, around)
    pull_module.pull(other_store, inproc_hub.client(token), REF, as_tag="py", verify_keys=[key.public_key()])
    assert given == [None]
    assert other_store.tags() == ["base", "mid", "py"]


def test_an_error_raised_between_pieces_still_writes_the_queued_ones(
    chain3, other_store, inproc_hub, monkeypatch, tmp_path
):
    """``meanwhile`` raising ends the fill as a failed request does: the pieces already handed to the
    workers are verified and written, so the next pull resumes them. It raises on its second call:
    the first comes as soon as the requests are submitted (one not started yet is cancelled), the
    second once one is answered, its pieces queued."""
    token = _push_chain3(chain3, inproc_hub)
    asked = 0

    def around(real, args, meanwhile):
        def failing() -> None:
            nonlocal asked
            asked += 1
            if asked == 2:
                raise OSError(28, "No space left on device (an install, say)")

        return real(*args[:-1], failing)

    _wrap_head_fill(monkeypatch, chain3, around)
    with pytest.raises(OSError, match="No space left"):
        pull_module.pull(other_store, inproc_hub.client(token), REF, as_tag="py")
    assert asked == 2
    monkeypatch.undo()
    again = pull_module.pull(other_store, inproc_hub.client(token), REF, as_tag="py")
    head = again.links[-1]
    assert head.chunks_resumed > 0  # the answered request's pieces were written after the error
    with SnapshotStore(tmp_path / "fresh-home") as fresh:
        changed = pull_module.pull(fresh, inproc_hub.client(token), REF, as_tag="py").links[-1].chunks_fetched
    assert head.chunks_resumed + head.chunks_fetched == changed
    assert (other_store.path("py") / "memory.bin").read_bytes() == (chain3.path("head") / "memory.bin").read_bytes()
