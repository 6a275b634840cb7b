"""docs/images.md stays true: its limits table, error table and provenance keys match the code."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

from forkd_client.images import build, errors
from forkd_client.images.limits import DEFAULT_LIMITS, ImageLimits

DOC = (Path(__file__).resolve().parents[3] / "docs" / "images.md").read_text()


def _size(value: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift and value % (1 << shift) == 0:
            return f"{value >> shift} {unit}"
    return str(value)


def test_the_limits_table_lists_every_limit_with_its_default():
    rows = dict(re.findall(r"^\| `(max_\w+)` \| ([^|]+?) \|", DOC, re.MULTILINE))
    fields = {f.name for f in dataclasses.fields(ImageLimits)}
    assert set(rows) == fields
    for name in fields:
        value = getattr(DEFAULT_LIMITS, name)
        assert rows[name] in (_size(value), str(value)), name


def test_the_error_table_names_every_error():
    classes = {name for name, obj in inspect.getmembers(errors, inspect.isclass) if issubclass(obj, errors.ImageError)}
    table = DOC.split("## Errors", 1)[1]
    named = set(re.findall(r"`(\w+)`", table))
    assert classes - {"ImageError"} <= named


def test_the_provenance_keys_are_the_ones_built():
    for key in (
        build.BASE_DIGEST,
        build.BASE_NAME,
        build.INDEX_DIGEST,
        build.DEBIAN_SUITE,
        build.DEBIAN_VARIANT,
        build.DEBIAN_PACKAGES,
    ):
        assert f"`{key}`" in DOC, key
