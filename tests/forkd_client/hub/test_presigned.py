"""Ranges from presigned URLs: spans merged across small gaps and cut back exactly; URLs reused for half their life."""

from __future__ import annotations

import pytest

from forkd_client.hub.presigned import MAX_REUSE_SECONDS, PresignedCache, merge_spans, slice_spans


def test_spans_merge_neighbours_within_the_gap_and_the_size_limit():
    batch = [(100, 10), (0, 10), (15, 5), (1000, 10), (1012, 8)]
    assert merge_spans(batch, gap=5, max_span=1 << 20) == [(0, 20), (100, 110), (1000, 1020)]
    assert merge_spans(batch, gap=0, max_span=1 << 20) == [(0, 10), (15, 20), (100, 110), (1000, 1010),
                                                           (1012, 1020)]
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
