"""coalesce(): which byte ranges a pull asks for (fill_link itself runs in every pull test)."""

from __future__ import annotations

from forkd_client.hub.fill import MAX_RANGES_PER_REQUEST, coalesce


def frames(*spans: tuple[int, int]) -> dict[int, tuple]:
    return {offset: (length, "blake3:x", length, []) for offset, length in spans}


def test_touching_frames_merge_and_gaps_split():
    wanted = {"blob": frames((0, 10), (10, 5), (30, 5))}
    assert coalesce(wanted, 1 << 20) == [("blob", [(0, 15), (30, 5)])]


def test_a_range_never_grows_past_the_limit():
    wanted = {"blob": frames((0, 60), (60, 60), (120, 60))}
    assert coalesce(wanted, 130) == [("blob", [(0, 120)]), ("blob", [(120, 60)])]


def test_requests_hold_at_most_the_range_count_and_the_byte_limit():
    spans = [(i * 100, 10) for i in range(MAX_RANGES_PER_REQUEST + 6)]  # none touch
    requests = coalesce({"a": frames(*spans), "b": frames((0, 5))}, 1 << 20)
    assert [len(r) for _, r in requests] == [MAX_RANGES_PER_REQUEST, 6, 1]
    assert [blob for blob, _ in requests] == ["a", "a", "b"]
    assert sorted(r for _, rs in requests for r in rs if _ == "a") == spans
    assert all(sum(n for _, n in rs) <= 1 << 20 for _, rs in requests)


def test_frames_within_the_gap_share_a_range_whose_gap_bytes_count_against_the_limit():
    wanted = {"blob": frames((0, 10), (15, 5), (40, 5), (100, 10))}
    assert coalesce(wanted, 1 << 20, gap=20) == [("blob", [(0, 45), (100, 10)])]  # 45 -> 100: 55 apart
    assert coalesce(wanted, 1 << 20, gap=5) == [("blob", [(0, 20), (40, 5), (100, 10)])]
    # the gap's bytes are fetched too, so they count: 0..45 does not fit in 40
    assert coalesce(wanted, 40, gap=20) == [("blob", [(0, 20), (40, 5), (100, 10)])]
