"""``forkd push`` moves its tag only from where it found it: a push that lost a race gets TagConflict
(the CLI exits 4, a conflict, saying so) unless it was forced."""

from __future__ import annotations

import pytest

from forkd_client.hub.client import HubClient, RepositoryClient
from forkd_client.hub.errors import TagConflict
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference


class RacedClient(HubClient):
    """Lets another push tag ``ref`` right before this push's final tag PUT."""

    def __init__(self, *args, rival, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rival = rival

    def repository(self, name):
        return RacedRepository(self, name)


class RacedRepository(RepositoryClient):
    hub: RacedClient

    def put_manifest(self, ref, data, **kwargs):
        if ref == "v1" and self.hub.rival is not None:
            rival, self.hub.rival = self.hub.rival, None
            rival()
        return super().put_manifest(ref, data, **kwargs)


def test_a_push_that_lost_the_race_for_its_tag_fails_unless_forced(chain3, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    rival_ref = Reference.parse("acme/py:v1")
    first = push(chain3, inproc_hub.client(token), "mid", Reference.parse("acme/py:mid"))

    def rival() -> None:
        push(chain3, inproc_hub.client(token), "mid", rival_ref, force=True)

    raced = RacedClient(str(inproc_hub.http.base_url), token, http=inproc_hub.http, rival=rival)
    with pytest.raises(TagConflict) as caught:
        push(chain3, raced, "head", ref)
    assert caught.value.status == 409 and caught.value.detail["actual"] == first.digest
    assert inproc_hub.client(token).repository("acme/py").tag_digest("v1") == first.digest  # the winner's tag stands

    again = RacedClient(str(inproc_hub.http.base_url), token, http=inproc_hub.http, rival=rival)
    forced = push(chain3, again, "head", ref, force=True)
    assert inproc_hub.client(token).repository("acme/py").tag_digest("v1") == forced.digest != first.digest
    assert push(chain3, inproc_hub.client(token), "head", ref).digest == forced.digest  # unchanged tag: no conflict
