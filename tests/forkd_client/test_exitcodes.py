"""forkd_client/exitcodes.py: each class of error maps to its documented code, and the table
in docs/cli.md lists exactly those codes. (tests/e2e/test_ci_push.py runs each class for real.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forkd_client import exitcodes as ec
from forkd_client.errors import (
    ChainBroken,
    DependentsExist,
    FileContentMismatch,
    Interrupted,
    InvalidTag,
    ParentContentMismatch,
    SnapshotExists,
    SnapshotNotFound,
    UsageError,
)
from forkd_client.hub.errors import (
    DigestInvalid,
    Forbidden,
    HasDependents,
    HubError,
    HubUnreachable,
    InvalidReference,
    NotFound,
    TagConflict,
    Unauthorized,
)
from manifest.errors import DigestMismatch

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Interrupted("stopped"), ec.EXIT_INTERRUPTED),
        (KeyboardInterrupt(), ec.EXIT_INTERRUPTED),
        (InvalidReference("bad ref"), ec.EXIT_USAGE),
        (InvalidTag("bad tag"), ec.EXIT_USAGE),
        (UsageError("--annotation x"), ec.EXIT_USAGE),
        (Unauthorized("expired", status=401), ec.EXIT_AUTH),
        (Forbidden("scope", status=403), ec.EXIT_AUTH),
        (TagConflict("moved", status=409), ec.EXIT_CONFLICT),
        (HasDependents("deps", status=409), ec.EXIT_CONFLICT),
        (HubError("immutable", code="TAG_IMMUTABLE", status=409), ec.EXIT_CONFLICT),
        (SnapshotExists("t"), ec.EXIT_CONFLICT),
        (DependentsExist("t", ["c"]), ec.EXIT_CONFLICT),
        (HubUnreachable("refused"), ec.EXIT_NETWORK),
        (HubError("bad gateway", status=502), ec.EXIT_NETWORK),
        (HubError("unavailable", status=503), ec.EXIT_NETWORK),
        (DigestInvalid("chunk 3", status=400), ec.EXIT_VERIFICATION),
        (DigestMismatch("blob", "sha256:a", "sha256:b"), ec.EXIT_VERIFICATION),
        (ParentContentMismatch("c", "p", "a" * 64, "b" * 64), ec.EXIT_VERIFICATION),
        (FileContentMismatch("t", "memory.bin", "x", "y"), ec.EXIT_VERIFICATION),
        (NotFound("no such tag", status=404), ec.EXIT_ERROR),
        (HubError("boom", status=500), ec.EXIT_ERROR),
        (SnapshotNotFound("t"), ec.EXIT_ERROR),
        (ChainBroken("broken", link="t"), ec.EXIT_ERROR),
        (OSError("disk"), ec.EXIT_ERROR),
    ],
)
def test_each_error_class_has_its_code(error, code):
    assert ec.exit_code_for(error) == code


def test_the_docs_table_lists_every_code():
    section = DOC.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", section, re.M)}
    defined = {v for k, v in vars(ec).items() if k.startswith("EXIT_")}
    assert documented == defined
