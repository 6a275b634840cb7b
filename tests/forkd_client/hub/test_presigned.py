"""Ranges from presigned URLs: spans merged across small gaps and cut back exactly; URLs reused for half their life."""

from __future__ import annotations

import pytest

from forkd_client.hub.errors import HubError
from forkd_client.hub.presigned import (
    MAX_REUSE_SECONDS,
    PresignedCache,
    merge_spans,
    parse_plan,
    read_plan,
    slice_spans,
)


def test_spans_merge_neighbours_within_the_gap_and_the_size_limit():
    batch = [(100, 10), (0, 10), (15, 5), (1000, 10), (1012, 8)]
    assert merge_spans(batch, gap=5, max_span=1 << 20) == [(0, 20), (100, 110), (1000, 1020)]
    assert merge_spans(batch, gap=0, max_span=1 << 20) == [(0, 10), (15, 20), (100, 110), (1000, 1010), (1012, 1020)]
    assert merge_spans([(0, 10), (10, 10), (20, 10)], gap=0, max_span=20) == [(0, 20), (20, 30)]


def test_slices_come_back_in_the_order_asked_whatever_the_spans():
    data = bytes(range(256)) * 8
    batch = [(1000, 10), (0, 10), (15, 5), (1012, 8)]
    spans = merge_spans(batch, gap=5, max_span=1 << 20)
    bodies = [memoryview(data[start:end]) for start, end in spans]
    assert [bytes(piece) for piece in slice_spans(batch, spans, bodies)] == [data[o : o + n] for o, n in batch]


@pytest.mark.parametrize(("expires", "reused_for"), [("300", 120.0), ("60", 30.0)])
def test_a_url_is_reused_for_half_its_stated_life_at_most_two_minutes(expires, reused_for):
    now = [1000.0]
    cache = PresignedCache(clock=lambda: now[0])
    url = f"http://s3.test/b/k?X-Amz-Expires={expires}&X-Amz-Signature=abc"
    cache.remember("acme/py", "blake3:aa", url)
    assert cache.get("acme/py", "blake3:aa") == url and cache.get("acme/py", "blake3:bb") is None
    now[0] += reused_for - 0.5
    assert cache.get("acme/py", "blake3:aa") == url
    now[0] += 1
    assert cache.get("acme/py", "blake3:aa") is None
    assert reused_for <= MAX_REUSE_SECONDS


def test_urls_without_a_stated_life_are_not_reused_and_forget_drops_one():
    cache = PresignedCache()
    cache.remember("acme/py", "blake3:aa", "http://store.test/object?sig=1")
    assert cache.get("acme/py", "blake3:aa") is None
    cache.remember("acme/py", "blake3:aa", "http://s3.test/b/k?X-Amz-Expires=300")
    cache.forget("acme/py", "blake3:aa")
    assert cache.get("acme/py", "blake3:aa") is None


# -- fetch plans (a recipe blob's bytes as ranges of pack objects) ---------------------------------

PACKS = {
    "http://s3.test/p/a?X-Amz-Signature=1": bytes(range(256)) * 4,
    "http://s3.test/p/b?X-Amz-Signature=2": bytes(reversed(range(256))) * 4,
}
A, B = PACKS
# blob bytes [0, 100) = a[500:600], [100, 150) = b[10:60], [150, 300) = a[0:150]
PLAN = {
    "digest": "sha256:" + "0" * 64,
    "sources": [A, B],
    "segments": [[0, 100, 0, 500], [100, 50, 1, 10], [150, 150, 0, 0]],
}
BLOB = PACKS[A][500:600] + PACKS[B][10:60] + PACKS[A][0:150]


def _get(calls: list[tuple[str, int, int]]):
    def get(url: str, start: int, end: int) -> memoryview:
        calls.append((url, start, end))
        return memoryview(PACKS[url][start:end])

    return get


def test_a_plan_is_fetched_from_its_sources_and_cut_back_into_the_ranges_asked():
    batch = [(120, 60), (0, 10), (90, 20), (200, 100)]  # two ranges straddle segments of two packs
    calls: list[tuple[str, int, int]] = []
    plan = parse_plan(PLAN, PLAN["digest"], batch)
    got = read_plan(plan, batch, gap=1 << 10, max_span=1 << 20, get=_get(calls), parallel=4)
    assert [bytes(piece) for piece in got] == [BLOB[o : o + n] for o, n in batch]
    # pack a's two segments are close: one GET covers them; pack b: one GET
    assert sorted(calls) == sorted([(A, 0, 600), (B, 10, 60)])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"digest": "sha256:" + "1" * 64}, "not a plan for this blob"),
        ({"sources": ["file:///etc/passwd", B]}, "not http"),
        ({"segments": [[0, 100, 2, 0]]}, "malformed segment"),
        ({"segments": [[0, 100, 0, 0], [50, 100, 0, 0]]}, "overlapping"),
        ({"segments": [[0, 100, 0, 0], [101, 199, 0, 0]]}, "does not cover bytes 100-"),
        ({"segments": [[0, 0, 0, 0]]}, "malformed segment"),
        ({"segments": "all of it"}, "no segment list"),
    ],
)
def test_a_broken_plan_is_refused_naming_what_is_wrong(change, message):
    with pytest.raises(HubError, match=message):
        parse_plan({**PLAN, **change}, PLAN["digest"], [(0, 300)])


def test_a_piece_of_a_plan_fetches_only_the_segments_it_covers():
    # a pull asks the hub once for a whole request's plan, then fetches and verifies it piece by
    # piece in parallel: each piece must GET its own bytes, not the whole plan's again
    plan = parse_plan(PLAN, PLAN["digest"], [(0, 300)])
    calls: list[tuple[str, int, int]] = []
    got = read_plan(plan, [(0, 10)], gap=1 << 10, max_span=1 << 20, get=_get(calls), parallel=4)
    assert [bytes(piece) for piece in got] == [BLOB[0:10]]
    assert calls == [(A, 500, 510)]  # blob bytes [0, 100) are a[500:600]
    calls.clear()
    got = read_plan(plan, [(210, 20)], gap=1 << 10, max_span=1 << 20, get=_get(calls), parallel=4)
    assert [bytes(piece) for piece in got] == [BLOB[210:230]]
    assert len(calls) == 1 and calls[0][2] - calls[0][1] == 20
