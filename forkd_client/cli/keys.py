"""``forkd keygen [PATH]``: make an Ed25519 signing key pair for ``forkd push --sign``.

The private key is written as unencrypted PKCS#8 PEM with mode 0600 (created with ``O_EXCL``,
so an existing key is never overwritten), the public key beside it as ``PATH.pub`` (mode 0644).
Default PATH: ``$XDG_CONFIG_HOME/forkd/keys/signing.key``. Keep the private key in your CI's
secret store; hand the ``.pub`` file to whoever pulls (``forkd pull --verify-key``, the
``trusted-keys.json`` of their client config) and to the hub's operator (its signature policy).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import ClientError
from .output import Context

__all__ = ["default_key_path", "register", "write_key_pair"]


class KeyExists(ClientError, FileExistsError):
    """keygen refuses to overwrite an existing key file."""


def default_key_path() -> Path:
    from ..hub.credentials import config_dir  # not imported by ``forkd --help``

    return config_dir() / "keys" / "signing.key"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("keygen", parents=[common], help="make an Ed25519 key pair for push --sign")
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        metavar="PATH",
        help="private key file to write (default $XDG_CONFIG_HOME/forkd/keys/signing.key); "
        "the public key goes to PATH.pub",
    )
    p.add_argument("--json", action="store_true", help="print the paths and fingerprint as JSON")
    p.set_defaults(func=run_keygen)


def write_key_pair(path: Path) -> tuple[Path, str]:
    """Write a new private key at ``path`` (0600) and its public key at ``path.pub``; return the
    public key's path and the key's fingerprint. Raises KeyExists (nothing written), OSError."""
    # cryptography loads only when a key is made, not with every forkd command
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from manifest.signature import fingerprint, public_key_pem

    public_path = path.with_name(path.name + ".pub")
    for existing in (path, public_path):
        if existing.exists() or existing.is_symlink():
            raise KeyExists(f"{existing} already exists: refusing to overwrite a key (choose another PATH)")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        os.chmod(path, 0o600)  # whatever the umask
        with open(public_path, "xb") as f:
            f.write(public_key_pem(key))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return public_path, fingerprint(key.public_key())


def run_keygen(args: argparse.Namespace, ctx: Context) -> int:
    path = (args.path or default_key_path()).expanduser()
    public_path, key_id = write_key_pair(path)
    if args.json:
        ctx.json({"private_key": str(path), "public_key": str(public_path), "fingerprint": key_id})
        return 0
    ctx.print(f"Private key: {path} (mode 0600; keep it secret, e.g. in your CI's secret store)")
    ctx.print(f"Public key:  {public_path}")
    ctx.print(f"Fingerprint: {key_id}")
    return 0
