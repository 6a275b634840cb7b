from __future__ import annotations

import pytest

from forkd_client import errors as e


@pytest.mark.parametrize(
    ("error", "stdlib"),
    [
        (e.InvalidTag("bad"), ValueError),
        (e.SnapshotNotFound("t"), LookupError),
        (e.SnapshotExists("t"), FileExistsError),
        (e.InvalidSnapshotDir("d"), ValueError),
    ],
)
def test_errors_are_also_stdlib_errors(error: e.ClientError, stdlib: type) -> None:
    assert isinstance(error, e.ClientError) and isinstance(error, stdlib)


def test_messages_name_the_thing() -> None:
    assert "'py-base'" in str(e.SnapshotNotFound("py-base"))
    dep = e.DependentsExist("py-base", ["a", "b"])
    assert dep.dependents == ["a", "b"] and "a, b" in str(dep) and "'py-base'" in str(dep)
    mismatch = e.ParentContentMismatch("child", "parent", "aa" * 32, "bb" * 32)
    assert all(s in str(mismatch) for s in ("child", "parent", "aa" * 32, "bb" * 32))
    assert "no parent_content_hash" in str(e.ParentContentMismatch("c", "p", None, "bb" * 32))
    broken = e.ChainBroken("x", link="mid", missing="base")
    assert (broken.link, broken.missing) == ("mid", "base")
