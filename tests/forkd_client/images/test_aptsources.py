"""forkd_client/images/aptsources.py: the host's apt sources, rewritten for the suite mmdebstrap builds."""

from __future__ import annotations

import pytest

from forkd_client.images.aptsources import host_sources, sources_for_suite
from forkd_client.images.errors import InvalidSetting

KEY_BLOCK = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n -----END PGP PUBLIC KEY BLOCK-----"


@pytest.fixture
def etc(tmp_path):
    (tmp_path / "apt" / "sources.list.d").mkdir(parents=True)
    (tmp_path / "os-release").write_text('PRETTY_NAME="Debian"\nVERSION_CODENAME=bookworm\nID=debian\n')
    return tmp_path


def test_deb822_and_one_line_files_are_both_read(etc):
    (etc / "apt/sources.list").write_text(
        "# comment\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main contrib\n"
        "deb-src http://mirror.example/debian bookworm main\n"
    )
    (etc / "apt/sources.list.d/debian.sources").write_text(
        "Types: deb deb-src\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n"
        f"Signed-By: {KEY_BLOCK}\n\n"
        "Types: deb\nURIs: http://off.example\nSuites: bookworm\nComponents: main\nEnabled: no\n"
    )
    (etc / "apt/sources.list.d/other.list").write_text("deb http://third.example/repo stable main\n")
    sources = host_sources(etc / "apt")
    assert [s.uris for s in sources] == [
        ("http://mirror.example/debian",),
        ("http://deb.debian.org/debian-security",),  # sources.list.d in name order, as apt reads it
        ("http://third.example/repo",),
    ]
    assert dict(sources[0].fields) == {"Architectures": "amd64", "Signed-By": "/usr/share/keyrings/k.gpg"}
    assert dict(sources[1].fields)["Signed-By"] == KEY_BLOCK


def test_host_release_entries_are_rewritten_for_another_suite(etc):
    (etc / "apt/sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://third.example/repo\nSuites: stable\nComponents: main\n"
    )
    text = sources_for_suite("trixie", etc=etc / "apt", os_release=etc / "os-release")
    assert text == (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie trixie-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: trixie-security\nComponents: main\n"
    )
    same = sources_for_suite("bookworm", etc=etc / "apt", os_release=etc / "os-release")
    assert "Suites: bookworm bookworm-updates" in same and "third.example" not in same


def test_no_usable_entry_is_a_clear_error(etc):
    (etc / "apt/sources.list").write_text("deb http://third.example/repo stable main\n")
    with pytest.raises(InvalidSetting, match="cannot derive Debian sources for suite 'trixie'"):
        sources_for_suite("trixie", etc=etc / "apt", os_release=etc / "os-release")
