"""``skopeo copy`` of a single-layer image into and out of the hub vs Debian's docker-registry.

One image (an uncompressed layer of ``--size-mib`` random bytes, default 512 MiB) in an OCI layout
is copied with skopeo (``--preserve-digests``) to each registry and back to a fresh layout, one
run each, in the same process and machine. The hub is reached as any OCI client reaches it: the
``/v2/`` challenge, the token endpoint with ``--dest-creds``/``--src-creds`` (user:API token);
docker-registry runs without auth (its Debian config minus htpasswd, bench/procs.py). Both pulled
layouts are checked byte-identical to the source. Prints the times, MiB/s, and registry/hub
ratios (≥ 1.0: the hub is at least as fast).

    python bench/oci_copy.py [--size-mib 512] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, mib_s, print_table, timed  # noqa: E402
from oci import sha256_file, skopeo_clear_cache, write_oci_layout  # noqa: E402
from procs import HubServer, RegistryServer, log_summary  # noqa: E402

sys.path.insert(0, str(ROOT))

TAG = "v1"


def skopeo(src: str, dst: str, creds: str | None) -> None:
    """One ``skopeo copy`` (fresh blob cache), plain HTTP, digests preserved; ``creds`` for the docker:// side."""
    skopeo_clear_cache()
    cmd = ["skopeo", "--insecure-policy", "copy", "--quiet", "--preserve-digests"]
    if src.startswith("docker://"):
        cmd += ["--src-tls-verify=false"] + (["--src-creds", creds] if creds else [])
    if dst.startswith("docker://"):
        cmd += ["--dest-tls-verify=false"] + (["--dest-creds", creds] if creds else [])
    else:
        cmd += ["--dest-oci-accept-uncompressed-layers"]
    result = subprocess.run([*cmd, src, dst], capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"skopeo copy {src} {dst} failed: {result.stderr.strip()}")


def same_layout(a: Path, b: Path) -> bool:
    """Both layouts hold the same blobs (names are their sha256, so compare names and re-hash b's)."""
    names_a = sorted(os.listdir(a / "blobs" / "sha256"))
    names_b = sorted(os.listdir(b / "blobs" / "sha256"))
    return names_a == names_b and all(sha256_file(b / "blobs" / "sha256" / n) == n for n in names_b)


def round_trip(host: str, src: Path, out: Path, creds: str | None) -> tuple[float, float]:
    ref = f"docker://{host}/bench/image:{TAG}"
    push = timed(lambda: skopeo(f"oci:{src}:{TAG}", ref, creds))
    pull = timed(lambda: skopeo(ref, f"oci:{out}:{TAG}", creds))
    if not same_layout(src, out):
        raise RuntimeError(f"the layout pulled from {host} differs from the source")
    return push, pull


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="oci-copy-") as tmp:
        root = Path(tmp)
        layer = root / "layer.tar"
        with layer.open("wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
        src = root / "src"
        write_oci_layout(src, TAG, [layer])
        size = args.size_mib << 20
        with RegistryServer(root / "registry", root / "registry.log") as registry:
            reg_push, reg_pull = round_trip(registry.host, src, root / "from-registry", None)
        with HubServer(root / "hub", root / "hub.log") as hub:
            token = hub.token("bench", "push:bench/*")
            hub_push, hub_pull = round_trip(hub.url.removeprefix("http://"), src, root / "from-hub", f"bench:{token}")
        print_table(
            ["copy", "docker-registry s", "hub s", "registry MiB/s", "hub MiB/s", "registry/hub (≥1: hub as fast)"],
            [
                [
                    "oci-layout → registry",
                    f"{reg_push:.2f}",
                    f"{hub_push:.2f}",
                    f"{mib_s(size, reg_push):.0f}",
                    f"{mib_s(size, hub_push):.0f}",
                    f"{reg_push / hub_push:.2f}×",
                ],
                [
                    "registry → oci-layout",
                    f"{reg_pull:.2f}",
                    f"{hub_pull:.2f}",
                    f"{mib_s(size, reg_pull):.0f}",
                    f"{mib_s(size, hub_pull):.0f}",
                    f"{reg_pull / hub_pull:.2f}×",
                ],
            ],
            title=f"skopeo copy of one {args.size_mib} MiB uncompressed layer, one run each",
        )
        print(log_summary(hub=root / "hub.log", registry=root / "registry.log"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
