"""docs/retention.md cannot drift: its PATCH body is applied to a real app and answers the documented policy,
and the GC report example has exactly the keys a run reports."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from hub_server.api.schemas import RepositoryPatch
from hub_server.registry.content.policy import Retention
from hub_server.registry.upkeep.gc import GcReport
from hub_server.registry.upkeep.retention import ExpiredTag, select_expired
from hub_server.tagglobs import TagGlobs
from tests.hub_server.conftest import Hub
from tests.hub_server.pushing import auth, check

DOC = Path(__file__).resolve().parents[2] / "docs" / "retention.md"
EXAMPLE = re.compile(r"<!-- json-example: ([\w-]+) -->\s*```json\n(.*?)```", re.DOTALL)


def examples() -> dict[str, object]:
    return {name: json.loads(body) for name, body in EXAMPLE.findall(DOC.read_text())}


def test_the_patch_example_gives_the_policy_example(hub: Hub, admin_token, images, tmp_path):
    docs = examples()
    assert set(docs) == {"patch", "policy", "gc-retention"}
    msgspec.json.decode(json.dumps(docs["patch"]).encode(), type=RepositoryPatch)
    hub.pusher(admin_token).push_chain("acme/ci-fixtures", images[:1], tmp_path / "p", "nightly-01")
    answer = check(
        hub.client.patch("/api/v1/repositories/acme/ci-fixtures", json=docs["patch"], headers=auth(admin_token)), 200
    ).json()
    assert answer["policy"] == docs["policy"]


def test_the_gc_report_example_has_the_real_keys():
    example = examples()["gc-retention"]
    report = GcReport(True, datetime.now(UTC), 0.0).to_json()
    assert set(example) <= set(report)
    now = datetime(2026, 11, 30, tzinfo=UTC)
    ((name, digest, updated, reason),) = select_expired(
        Retention(1, None, TagGlobs.parse("nightly-*")),
        [
            ("nightly-01", "sha256:a", datetime(2026, 11, 19, tzinfo=UTC)),
            ("nightly-12", "sha256:b", datetime(2026, 11, 29, tzinfo=UTC)),
        ],
        now,
    )
    entry = ExpiredTag(1, "acme/ci-fixtures", name, digest, updated, reason).to_json()
    (documented,) = example["retention"]
    assert set(documented) == set(entry)
    assert documented["reason"].replace("10", "1") == entry["reason"]
