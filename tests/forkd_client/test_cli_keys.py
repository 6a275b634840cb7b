"""``forkd keygen``: an Ed25519 pair, the private key 0600, never overwritten, usable by push --sign."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from forkd_client.cli.main import main
from manifest.signature import fingerprint, load_private_key, load_public_key


def test_keygen_writes_a_private_key_0600_and_the_public_key_beside_it(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert main(["keygen", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    private = tmp_path / "cfg" / "forkd" / "keys" / "signing.key"
    assert out == {
        "private_key": str(private),
        "public_key": str(private) + ".pub",
        "fingerprint": fingerprint(load_public_key(Path(str(private) + ".pub"))),
    }
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert fingerprint(load_private_key(private).public_key()) == out["fingerprint"]


def test_keygen_refuses_to_overwrite_and_writes_nothing(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ci.key"
    assert main(["keygen", str(path)]) == 0
    before = path.read_bytes(), (tmp_path / "ci.key.pub").read_bytes()
    capsys.readouterr()
    assert main(["keygen", str(path)]) == 1
    assert "already exists: refusing to overwrite" in capsys.readouterr().err
    assert (path.read_bytes(), (tmp_path / "ci.key.pub").read_bytes()) == before
    # a leftover public key alone is refused too, and no private key is created
    (tmp_path / "other.key.pub").write_text("x")
    assert main(["keygen", str(tmp_path / "other.key")]) == 1
    assert not (tmp_path / "other.key").exists()


def test_push_with_a_public_key_as_signing_key_is_a_clear_error(tmp_path: Path, capsys, home) -> None:
    path = tmp_path / "ci.key"
    assert main(["keygen", str(path)]) == 0
    capsys.readouterr()
    assert main(["push", "nothing", "127.0.0.1:9/team/py:v1", "--sign", str(path) + ".pub"]) == 1
    assert "not an unencrypted PEM private key" in capsys.readouterr().err


def test_push_with_a_missing_signing_key_names_the_option_and_the_file(tmp_path: Path, capsys, home) -> None:
    missing = tmp_path / "nope.key"
    assert main(["push", "nothing", "127.0.0.1:9/team/py:v1", "--sign", str(missing)]) == 1
    assert f"forkd: error: --sign {missing}: No such file or directory" in capsys.readouterr().err


def test_verify_key_with_a_forkd_registry_pull_is_refused(tmp_path: Path, capsys, home) -> None:
    """forkd's registry.json packs are unsigned: a requested verification must not silently not happen."""
    assert main(["pull", "--hub", "http://127.0.0.1:9/registry.json", "acme/py", "--verify-key", "k.pub"]) == 2
    assert "--verify-key needs a hub reference" in capsys.readouterr().err
