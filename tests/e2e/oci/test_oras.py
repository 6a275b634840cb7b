"""Interop with oras-py (PyPI ``oras``): login with a hub token, push an artifact (monolithic and chunked
uploads), pull it back byte-identical, list tags, and attach a referrer with ``subject``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess

oras_client = pytest.importorskip("oras.client", reason="oras is in the test extra (pyproject.toml)")
oras_oci = pytest.importorskip("oras.oci")
oras_decorator = pytest.importorskip("oras.decorator")

pytestmark = pytest.mark.slow


@pytest.fixture
def oras(oci_hub: HubProcess, admin_token: str, host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # oras keeps its docker config under $HOME
    client = oras_client.OrasClient(hostname=host, insecure=True)
    client.login(
        username="oras-user",
        password=admin_token,
        hostname=host,
        tls_verify=False,
        config_path=str(tmp_path / "config.json"),
    )
    return client


def artifact_files(root: Path) -> list[Path]:
    root.mkdir()
    files = [root / "model.bin", root / "README.md"]
    files[0].write_bytes(bytes(range(256)) * 5000)
    files[1].write_text("# an artifact pushed by oras-py\n")
    return files


def test_push_pull_and_tags(
    oras, oci_hub: HubProcess, admin_token: str, host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    files = artifact_files(tmp_path / "src")
    monkeypatch.chdir(tmp_path / "src")
    r = oras.push(files=[f.name for f in files], target=f"{host}/oras/art:v1")
    assert r.status_code == 201
    oras.push(files=[f.name for f in files], target=f"{host}/oras/art:v2", do_chunked=True, chunk_size=100_000)
    out = tmp_path / "out"
    pulled = oras.pull(target=f"{host}/oras/art:v2", outdir=str(out))
    assert sorted(Path(p).name for p in pulled) == sorted(f.name for f in files)
    for f in files:
        assert (out / f.name).read_bytes() == f.read_bytes()
    assert oras.get_tags(f"{host}/oras/art") == ["v1", "v2"]
    manifest = httpx.get(f"{oci_hub.url}/v2/oras/art/manifests/v1", headers={"Authorization": f"Bearer {admin_token}"})
    layers = json.loads(manifest.content)["layers"]
    assert {layer["annotations"]["org.opencontainers.image.title"] for layer in layers} == {f.name for f in files}


def test_a_referrer_pushed_with_subject_is_listed(
    oras, oci_hub: HubProcess, admin_token: str, host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    files = artifact_files(tmp_path / "src")
    monkeypatch.chdir(tmp_path / "src")
    oras.push(files=[files[1].name], target=f"{host}/oras/signed:v1")
    headers = {"Authorization": f"Bearer {admin_token}"}
    image = httpx.get(f"{oci_hub.url}/v2/oras/signed/manifests/v1", headers=headers)
    subject = image.headers["Docker-Content-Digest"]
    (tmp_path / "src" / "sig.txt").write_text("a signature\n")
    r = oras.push(
        files=["sig.txt"],
        target=f"{host}/oras/signed:sig",
        subject=oras_oci.Subject(image.headers["Content-Type"], subject, len(image.content)),
    )
    assert r.headers["OCI-Subject"] == subject
    listed = httpx.get(f"{oci_hub.url}/v2/oras/signed/referrers/{subject}", headers=headers).json()["manifests"]
    assert len(listed) == 1
    sig = httpx.get(f"{oci_hub.url}/v2/oras/signed/manifests/sig", headers=headers)
    assert listed[0]["digest"] == sig.headers["Docker-Content-Digest"]


def _client(host: str, token: str, tmp_path: Path):
    client = oras_client.OrasClient(hostname=host, insecure=True)
    client.login(username="u", password=token, hostname=host, tls_verify=False, config_path=str(tmp_path / "c.json"))
    return client


class BackedOff(Exception):
    """oras-py's retry decorator went to sleep: it took an answer for an error worth retrying."""


def test_one_client_writes_to_two_repositories_and_deletes(
    oci_hub: HubProcess, host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """oras-py keeps one registry token for everything and, holding one, asks the token endpoint again only after
    a 403 (on a 401 it retries with the same token): a token lacking a scope its API token has is therefore 403
    ``insufficient_scope`` (docs/http-api.md). Its delete (HEAD, then DELETE by digest) gets a token for
    ``delete`` that way; an API token without delete never deletes, and learns it at once (issue 29): the 403
    carries a challenge, so oras-py asks for a token once instead of retrying a bare 403 for 131 s."""
    monkeypatch.setenv("HOME", str(tmp_path))
    files = artifact_files(tmp_path / "src")
    monkeypatch.chdir(tmp_path / "src")
    writer = _client(host, oci_hub.token("oras-writer", "push:oras/*", "delete:oras/*"), tmp_path)
    for repo in ("oras/one", "oras/two"):
        assert writer.push(files=[f.name for f in files], target=f"{host}/{repo}:v1").status_code == 201
    assert writer.get_tags(f"{host}/oras/two") == ["v1"]
    pusher = _client(host, oci_hub.token("oras-pusher", "push:oras/*"), tmp_path)
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # its backoff is 3 + 3**n s, five times: 131 s before the refusal
        slept.append(seconds)
        raise BackedOff(f"oras-py backs off {seconds} s before retrying")

    monkeypatch.setattr(oras_decorator.time, "sleep", sleep)
    with pytest.raises(RuntimeError, match=r"Delete was not successful.*DENIED"):
        pusher.delete_tag(f"{host}/oras/one", "v1")  # 403 DENIED, challenged: no token of it could
    assert slept == []
    assert writer.delete_tag(f"{host}/oras/one", "v1") is True
    assert writer.get_tags(f"{host}/oras/one") == []


def test_a_push_token_deletes_where_its_api_token_may(
    oci_hub: HubProcess, host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 29 item 4 as oras-py meets it: the registry token its push obtained (``pull,push``) deletes, without
    asking the token endpoint again, where its API token holds ``delete`` (the token endpoint's ``push`` carries
    ``delete`` then, docs/http-api.md). Before, that DELETE was a 403 and oras-py asked for a new token."""
    monkeypatch.setenv("HOME", str(tmp_path))
    files = artifact_files(tmp_path / "src")
    monkeypatch.chdir(tmp_path / "src")
    client = _client(host, oci_hub.token("oras-deleter", "push:oras/*", "delete:oras/*"), tmp_path)
    assert client.push(files=[f.name for f in files], target=f"{host}/oras/gone:v1").status_code == 201
    sent: list[tuple[str, str, int]] = []
    request = client.session.request

    def recorded(method: str, url: str, *args, **kwargs):
        response = request(method, url, *args, **kwargs)
        sent.append((method, httpx.URL(url).path, response.status_code))
        return response

    monkeypatch.setattr(client.session, "request", recorded)
    assert client.delete_tag(f"{host}/oras/gone", "v1") is True
    assert [path for _, path, _ in sent if path == "/v2/token"] == []  # the push token did it
    assert [(method, status) for method, _, status in sent] == [("HEAD", 200), ("DELETE", 202)]
    assert client.get_tags(f"{host}/oras/gone") == []
