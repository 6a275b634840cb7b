"""The layer page names the key of each signature referrer of the layer, and says whether this hub checked it."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from manifest.signature import fingerprint
from tests.hub_server.conftest import Hub
from tests.hub_server.registry.content.test_signature_policy import push_signature, push_untagged, tag, write_policy


def layer_page(hub: Hub, token: str, url: str) -> str:
    """The page of a repository made public first (the catalog reads with a session, not a token)."""
    repo = url.split("/")[2] + "/" + url.split("/")[3]
    assert (
        hub.client.patch(
            f"/api/v1/repositories/{repo}", json={"public": True}, headers={"Authorization": f"Bearer {token}"}
        ).status_code
        == 200
    )
    response = hub.client.get(url)
    assert response.status_code == 200, response.text[:300]
    return response.text


def test_the_layer_page_shows_signed_by_key(make_hub, images, tmp_path) -> None:
    team_key, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    hub = make_hub(signature_policy=write_policy(tmp_path / "policy", team=[team_key]))
    token = hub.token("admin", "admin")
    pusher = hub.pusher(token)
    head = push_untagged(pusher, "team/py", images, tmp_path / "w")
    push_signature(pusher, "team/py", head, stranger)
    push_signature(pusher, "team/py", head, team_key)
    assert tag(pusher, "team/py", "v1", head).status_code == 201
    html = layer_page(hub, token, "/r/team/py/t/v1")
    assert f'Signed by key <code title="{fingerprint(team_key.public_key())}">' in html
    assert (
        "(verified with this hub&#39;s registered keys)" in html or "(verified with this hub's registered keys)" in html
    )
    assert f'<code title="{fingerprint(stranger.public_key())}">' in html and "does not verify" in html

    # a namespace without registered keys: the claimed key, not checked here
    other = push_untagged(pusher, "acme/py", images, tmp_path / "w2")
    push_signature(pusher, "acme/py", other, stranger)
    assert tag(pusher, "acme/py", "v1", other).status_code == 201
    html = layer_page(hub, token, "/r/acme/py/t/v1")
    assert f'<code title="{fingerprint(stranger.public_key())}">' in html and "not checked here" in html


def test_an_unsigned_layer_says_so(hub: Hub, images, tmp_path) -> None:
    token = hub.token("admin", "admin")
    pusher = hub.pusher(token)
    head = push_untagged(pusher, "acme/py", images, tmp_path / "w")
    assert tag(pusher, "acme/py", "v1", head).status_code == 201
    html = layer_page(hub, token, "/r/acme/py/t/v1")
    section = html.split('id="provenance-h"', 1)[1].split("</section>", 1)[0]
    assert "Not signed, and no provenance attached" in section and "Signed by key" not in section
