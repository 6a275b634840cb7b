import stat

import pytest

from forkd_client.hub.credentials import Credentials, normalize_url
from forkd_client.hub.errors import HubError


def test_login_is_private_and_becomes_default(tmp_path, monkeypatch):
    monkeypatch.delenv("FORKD_HUB_URL", raising=False)
    monkeypatch.delenv("FORKD_TOKEN", raising=False)
    creds = Credentials(tmp_path / "forkd" / "credentials.json")
    url = creds.login("127.0.0.1:8080", "fkd_secret")
    assert url == "http://127.0.0.1:8080"
    assert stat.S_IMODE(creds.path.stat().st_mode) == 0o600
    login = creds.resolve()
    assert (login.url, login.token) == (url, "fkd_secret")
    assert creds.logout() == url
    assert creds.resolve().token is None


def test_environment_overrides(tmp_path, monkeypatch):
    creds = Credentials(tmp_path / "c.json")
    creds.login("http://127.0.0.1:8080", "stored")
    monkeypatch.setenv("FORKD_HUB_URL", "http://127.0.0.1:9000/")
    monkeypatch.setenv("FORKD_TOKEN", "from-env")
    login = creds.resolve()
    assert (login.url, login.token) == ("http://127.0.0.1:9000", "from-env")


def test_xdg_location(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert Credentials().path == tmp_path / "forkd" / "credentials.json"


def test_malformed_file_is_a_clear_error(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[1, 2]")
    with pytest.raises(HubError, match="malformed"):
        Credentials(path).resolve()


@pytest.mark.parametrize("bad", ["ftp://x", "http://"])
def test_bad_urls(bad):
    with pytest.raises(HubError, match="invalid hub URL"):
        normalize_url(bad)


@pytest.mark.parametrize("content", ['{"hubs": {"http://h": "token"}}', '{"hubs": [], "default": 1}', '{"default": 5}'])
def test_malformed_entries_are_a_clear_error(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(HubError, match="malformed"):
        Credentials(path).resolve()
