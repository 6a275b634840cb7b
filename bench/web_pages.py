#!/usr/bin/env python3
"""Catalog page latency on a seeded hub: every web page against a 100 ms budget and against the
JSON API answering the same question, measured in the same run.

Usage: python bench/web_pages.py [--repos 1000] [--tags-per-repo 10] [--requests 30] [--dir DIR]

The hub's metadata database is seeded directly (through the hub's own schema and migrations, so
the search index triggers run as they do for pushes) with --repos repositories in 50
namespaces, --tags-per-repo tags each, one layer manifest per tag chained on the previous tag
(and every repository's first layer on another repository's, so chains are up to 14 links deep
and layers have dependents), Markdown descriptions, compatibility metadata, annotations, one
audit event per tag (the pusher) and 10% private repositories. Every manifest and config document
is written to the blob store, so layer pages read real documents. Then a real ``forkd-hub
serve`` process serves it, and each page is fetched --requests times in sequence after 3
untimed warm-ups (one client, loopback: the time is the server's render plus one local round
trip). Ratios: median / 100 ms budget, and median / the JSON API's median for the same data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, print_table  # noqa: E402
from procs import HubServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hub_server.audit import AuditEvent  # noqa: E402
from hub_server.db.engine import make_engine, make_session_factory  # noqa: E402
from hub_server.db.models import Manifest, Repository, RepositoryManifest, Tag, utcnow  # noqa: E402
from hub_server.db.schema import upgrade  # noqa: E402
from hub_server.registry.core.paths import blob_key  # noqa: E402
from hub_server.settings import Settings  # noqa: E402
from hub_server.storage.factory import create_store  # noqa: E402
from manifest import mediatypes as mt  # noqa: E402
from manifest.digest import digest_bytes  # noqa: E402

BUDGET_MS = 100.0
NAMESPACES = 50
WORDS = [
    "python",
    "numpy",
    "pandas",
    "node",
    "rust",
    "postgres",
    "redis",
    "torch",
    "jupyter",
    "golang",
    "ruby",
    "java",
    "duckdb",
    "ffmpeg",
    "chromium",
    "agent",
    "sandbox",
    "ci",
    "warm",
    "minimal",
]
VMMS = [("qemu-microvm", "x86_64"), ("firecracker", "x86_64"), ("firecracker", "aarch64")]


def _documents(parent: str | None, rng: random.Random, tag: str) -> tuple[bytes, bytes, dict, dict]:
    vmm, arch = rng.choice(VMMS)
    compat = {"vmm": vmm, "arch": arch, "memMiB": rng.choice([256, 512, 1024, 2048]), "vcpus": rng.choice([1, 2])}
    annotations = {"dev.forkd.recipe": f"{rng.choice(WORDS)} {rng.choice(WORDS)} recipe for {tag}"}
    config = json.dumps(
        {
            "mediaType": mt.CONFIG,
            "created": "2026-01-01T00:00:00Z",
            "parent": {"digest": parent, "tag": None} if parent else None,
            "compat": compat,
            "files": {
                mt.VMSTATE_FILE: {"size": 900, "digest": "blake3:" + "0" * 64},
                mt.MEMORY_FILE: {"size": 1 << 30, "digest": "blake3:" + "1" * 64},
            },
            "annotations": annotations,
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": mt.OCI_MANIFEST,
            "artifactType": mt.LAYER_ARTIFACT,
            "config": {"mediaType": mt.CONFIG, "digest": str(digest_bytes(config)), "size": len(config)},
            "layers": [
                {
                    "mediaType": mt.CHUNK_MAP,
                    "digest": "blake3:" + "2" * 64,
                    "size": 4096,
                    "annotations": {mt.ANNOTATION_FILE: mt.MEMORY_FILE},
                }
            ],
        }
    ).encode()
    return manifest, config, compat, annotations


async def seed(data_dir: Path, repos: int, tags_per_repo: int) -> None:
    settings = Settings.for_data_dir(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.database_url)
    store = create_store(settings.storage)
    rng = random.Random(13)
    try:
        await upgrade(engine)
        sessions = make_session_factory(engine)
        now = utcnow()
        first_layers: list[str] = []
        async with sessions() as session:
            for r in range(repos):
                namespace, name = f"ns-{r % NAMESPACES:02d}", f"{rng.choice(WORDS)}-{r:04d}"
                words = " ".join(rng.sample(WORDS, 4))
                repo = Repository(
                    namespace=namespace,
                    name=name,
                    public=r % 10 != 0,
                    pull_count=rng.randint(0, 500),
                    description=f"**{words}** snapshot.\n\n- warm `{rng.choice(WORDS)}`\n- built nightly",
                    created_at=now,
                    updated_at=now,
                )
                session.add(repo)
                await session.flush()
                parent = first_layers[-1] if first_layers and r % 4 else None
                for t in range(tags_per_repo):
                    tag = f"v{t}"
                    manifest, config, compat, annotations = _documents(parent, rng, f"{repo.full_name}:{tag}")
                    digest = str(digest_bytes(manifest))
                    await store.put(blob_key(digest), manifest)
                    await store.put(blob_key(str(digest_bytes(config))), config)
                    session.add(
                        Manifest(
                            digest=digest,
                            size=len(manifest),
                            media_type=mt.OCI_MANIFEST,
                            artifact_type=mt.LAYER_ARTIFACT,
                            config_digest=str(digest_bytes(config)),
                            parent_digest=parent,
                            created_at=now,
                            logical_size=(1 << 30) + 900,
                            stored_size=rng.randint(1 << 20, 64 << 20),
                            shared_with_parent=(1 << 30) if parent else 0,
                            compat=compat,
                            annotations=annotations,
                        )
                    )
                    await session.flush()
                    session.add(RepositoryManifest(repository_id=repo.id, manifest_digest=digest, created_at=now))
                    session.add(Tag(repository_id=repo.id, name=tag, manifest_digest=digest, updated_at=now))
                    session.add(
                        AuditEvent(
                            at=now,
                            actor=f"ci-{r % 7}",
                            action="tag",
                            repository=repo.full_name,
                            reference=tag,
                            digest=digest,
                        )
                    )
                    if t == 0:
                        first_layers.append(digest)
                    parent = digest
                if r % 50 == 49:
                    await session.commit()
            await session.commit()
    finally:
        await store.close()
        await engine.dispose()


def measure(client: httpx.Client, path: str, n: int) -> list[float]:
    for _ in range(3):
        client.get(path).raise_for_status()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - t) * 1000)
        response.raise_for_status()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=int, default=1000)
    parser.add_argument("--tags-per-repo", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="web-pages-", dir=args.dir))
    try:
        t = time.perf_counter()
        asyncio.run(seed(root / "data", args.repos, args.tags_per_repo))
        print(
            f"seeded {args.repos} repositories, {args.repos * args.tags_per_repo} tags "
            f"in {time.perf_counter() - t:.1f} s"
        )
        with HubServer(root / "data", root / "hub.log") as hub, httpx.Client(base_url=hub.url, timeout=30) as client:
            home = client.get("/").text
            repo = re.search(r'<h3><a href="/r/(ns-\d+/[a-z]+-\d+)">', home).group(1)  # type: ignore[union-attr]
            namespace = repo.split("/")[0]
            deep = f"v{args.tags_per_repo - 1}"
            pages = [
                ("home /", "/", "/api/v1/repositories?n=6"),
                ("search ?q=python", "/search?q=python", "/api/v1/repositories?q=python&n=20"),
                ("search ?q=numpy pandas&vmm&arch", "/search?q=numpy+pandas&vmm=firecracker&arch=x86_64", None),
                ("search, no words, page 20", "/search?page=20", "/api/v1/repositories?n=20"),
                (f"namespace /n/{namespace}", f"/n/{namespace}", f"/api/v1/repositories?namespace={namespace}&n=20"),
                ("repository /r/…", f"/r/{repo}", f"/api/v1/repositories/{repo}"),
                (
                    f"layer /r/…/t/{deep} (deep chain)",
                    f"/r/{repo}/t/{deep}",
                    f"/api/v1/repositories/{repo}/lineage/{deep}",
                ),
                ("layer /r/…/t/v0 (with dependents)", f"/r/{repo}/t/v0", f"/api/v1/repositories/{repo}/lineage/v0"),
            ]
            rows = []
            for label, path, api in pages:
                times = measure(client, path, args.requests)
                page_ms = statistics.median(times)
                p95 = sorted(times)[int(0.95 * (len(times) - 1))]
                api_ms = statistics.median(measure(client, api, args.requests)) if api else None
                rows.append(
                    [
                        label,
                        f"{page_ms:.1f}",
                        f"{p95:.1f}",
                        f"{page_ms / BUDGET_MS:.2f}x",
                        f"{api_ms:.1f}" if api_ms else "–",
                        f"{page_ms / api_ms:.2f}x" if api_ms else "–",
                    ]
                )
        print_table(
            ["page", "median ms", "p95 ms", "vs 100 ms budget", "JSON API ms", "vs JSON API"],
            rows,
            title=f"{args.repos} repositories, {args.repos * args.tags_per_repo} tags, "
            f"{args.requests} sequential requests per page ({MACHINE_NOTE})",
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
