"""A small catalog for the web tests, pushed through the real HTTP API of an in-process hub.

acme/py-base:3.12      public, base layer (qemu-microvm, x86_64, 4 MiB), described in Markdown
acme/py-numpy:1.26     public, child of py-base (firecracker, aarch64), an annotation to search
acme/py-pandas:2.2     public, child of py-numpy
beta/secret:v1         PRIVATE, hostile description and annotations
evil/xss:v1            public, hostile description and annotations (script, SVG and attribute injection)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from manifest.model import LayerConfig
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import BuiltLayer, PushClient, auth

HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>"\'><svg onload=alert(2)>'
HOSTILE_MARKDOWN = f'# Evil\n\n{HOSTILE}\n\n[click](javascript:alert(3)) <a href="javascript:alert(4)">x</a>'


@dataclass
class Catalog:
    admin: str
    layers: dict[str, BuiltLayer]


def with_config(layer: BuiltLayer, parent: BuiltLayer | None = None, **changes: object) -> BuiltLayer:
    """The layer with its config's compat/annotations replaced (and its parent re-pointed)."""
    obj = json.loads(layer.config)
    obj.update(changes)
    if parent is not None:
        obj["parent"] = {"digest": parent.digest, "tag": None}
    config = LayerConfig.from_json(json.dumps(obj).encode()).to_json()
    return layer.rebuild(config=config)


def _describe(hub: Hub, admin: str, repo: str, text: str) -> None:
    r = hub.client.patch(f"/api/v1/repositories/{repo}", json={"description": text}, headers=auth(admin))
    assert r.status_code == 200, r.text


def _push(pusher: PushClient, repo: str, layer: BuiltLayer, tag: str, *, public: bool) -> None:
    pusher.push_layer(repo, layer, tag, public=public)


def seed_catalog(hub: Hub, images: list[tuple[Path, bytes]], workdir: Path, *, pulls: bool = False) -> Catalog:
    """Push the catalog above; with ``pulls``, fetch a few chains so "most pulled" has entries."""
    admin = hub.token("admin", "admin")
    pusher = hub.pusher(admin)
    base = with_config(
        pusher.build_layer("acme/py-base", *images[0], workdir / "b"),
        compat={"vmm": "qemu-microvm", "arch": "x86_64", "memMiB": 4},
        annotations={"org.opencontainers.image.title": "Python base"},
    )
    # the hostile and private repositories first, so the acme ones are the most recently updated
    secret = with_config(base, annotations={"secret.note": "zebra-private-marker " + HOSTILE})
    _push(pusher, "beta/secret", secret, "v1", public=False)
    evil = with_config(base, annotations={"evil": HOSTILE, HOSTILE[:60]: "key is hostile too"})
    _push(pusher, "evil/xss", evil, "v1", public=True)
    _describe(hub, admin, "beta/secret", "zebra-private-marker internal build")
    _describe(hub, admin, "evil/xss", HOSTILE_MARKDOWN)
    _push(pusher, "acme/py-base", base, "3.12", public=True)
    numpy = pusher.build_layer("acme/py-numpy", *images[1], workdir / "n", base)
    numpy = with_config(
        numpy,
        base,
        compat={"vmm": "firecracker", "arch": "aarch64", "memMiB": 8},
        annotations={"dev.forkd.provenance": "built by ci-runner-7 from recipe numpy.toml"},
    )
    _push(pusher, "acme/py-numpy", numpy, "1.26", public=True)
    pandas = pusher.build_layer("acme/py-pandas", *images[2], workdir / "p", numpy)
    pandas = with_config(pandas, numpy, compat={"vmm": "firecracker", "arch": "aarch64", "memMiB": 8})
    _push(pusher, "acme/py-pandas", pandas, "2.2", public=True)
    _describe(hub, admin, "acme/py-numpy", "NumPy 1.26 and OpenBLAS, imported and warm, on top of `py-base`.")
    _describe(hub, admin, "acme/py-base", "**Python 3.12** on a tiny guest.\n\n- pip ready\n- `uv` installed")
    if pulls:
        for repo, tag, times in [
            ("acme/py-numpy", "1.26", 3),
            ("acme/py-base", "3.12", 2),
            ("acme/py-pandas", "2.2", 1),
        ]:
            for _ in range(times):
                assert hub.client.get(f"/api/v1/repositories/{repo}/chain/{tag}").status_code == 200
    return Catalog(admin, {"base": base, "numpy": numpy, "pandas": pandas, "secret": secret, "evil": evil})
