"""The SSRF allow list: parsing, and checking every address a URL's host resolves to."""

from __future__ import annotations

import asyncio

import pytest

from hub_server.settings import SettingsError, load_settings
from hub_server.webhooks.guard import AllowList, AllowListError, DestinationRefused, check_url


def check(url: str, allow: str):  # noqa: ANN201
    return asyncio.run(check_url(url, AllowList.parse(allow)))


def test_parse_networks_addresses_and_host_names():
    allow = AllowList.parse(" 10.0.0.0/8, 127.0.0.1 ,::1, hooks.example.com,*.ci.example.org,")
    assert [str(n) for n in allow.networks] == ["10.0.0.0/8", "127.0.0.1/32", "::1/128"]
    assert allow.hosts == ("hooks.example.com", "*.ci.example.org")
    assert allow.host_listed("a.ci.example.org") and not allow.host_listed("ci.example.org.evil.com")
    assert AllowList.parse("").empty


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "http://x", "a b", "evil.com/8", "*"])
def test_a_bad_entry_is_named(entry):
    with pytest.raises(AllowListError, match="neither an IP network"):
        AllowList.parse(f"127.0.0.1/32,{entry}")


def test_the_setting_is_validated_when_loaded():
    with pytest.raises(SettingsError, match="FORKD_HUB_WEBHOOK_ALLOW"):
        load_settings(env={"FORKD_HUB_WEBHOOK_ALLOW": "10.0.0.0/40"})
    assert load_settings(env={"FORKD_HUB_WEBHOOK_ALLOW": "127.0.0.1/32"}).webhook_allow == "127.0.0.1/32"


def test_an_address_inside_the_list_passes_and_is_the_one_connected_to():
    destination = check("http://127.0.0.1:9/hook", "127.0.0.0/30")
    assert (destination.scheme, destination.host, destination.port, destination.address) == (
        "http",
        "127.0.0.1",
        9,
        "127.0.0.1",
    )


@pytest.mark.parametrize(
    ("url", "allow"),
    [
        ("http://127.0.0.2/", "127.0.0.1/32"),
        ("http://[::1]/", "127.0.0.0/8"),
        ("http://[::ffff:127.0.0.2]/", "127.0.0.1/32"),  # an IPv4-mapped address is its IPv4 address
        ("http://localhost/", "10.0.0.0/8"),  # what a name resolves to is checked
        ("http://localhost/", "hooks.example.com"),
        ("http://127.0.0.1/", ""),
    ],
)
def test_outside_the_list_is_refused(url, allow):
    with pytest.raises(DestinationRefused, match=r"^refused: .*FORKD_HUB_WEBHOOK_ALLOW"):
        check(url, allow)


def test_a_name_resolving_to_several_addresses_needs_all_of_them_inside():
    # localhost resolves to 127.0.0.1 (and ::1 where IPv6 is configured): both must be allowed
    assert check("http://localhost:1/", "127.0.0.0/8,::1/128").address in ("127.0.0.1", "::1")


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http:///path", "127.0.0.1:80", "http://127.0.0.1:99999/"])
def test_not_an_http_url(url):
    with pytest.raises(ValueError, match="webhook URL"):
        check(url, "127.0.0.1/32")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/a b",  # a space: every delivery would fail (issue 27, item 8)
        "http://127.0.0.1:9/hook\t",
        "http://127.0.0.1:9/\x00",
        "http://127.0.0.1:9/\r\nX-Injected: 1",
        "http://127.0.0.1:9/\x7f",
        "http://127.0.0.1:9/\x9b",
        "http://exa mple.com/",
        " http://127.0.0.1:9/",
        "http://127.0.0.1:9/\u2003",  # unicode whitespace
        "http://bad_host!/",
    ],
)
def test_a_url_no_delivery_could_send_is_refused(url):
    from hub_server.webhooks.guard import split_url

    with pytest.raises(ValueError, match="webhook URL"):
        split_url(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/a%20b", "https://hooks.example.com/x?y=1", "http://[::1]:8/"])
def test_urls_a_delivery_can_send_pass(url):
    from hub_server.webhooks.guard import split_url

    assert split_url(url)[0] in ("http", "https")
