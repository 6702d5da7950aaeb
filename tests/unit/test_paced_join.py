"""The paced engine's per-key operator (jobs/join/paced.py): when it emits, what it keeps, what it
counts. Times are plain numbers (the operator's milliseconds); the window is [-10, +5]."""

from __future__ import annotations

from jobs.join.paced import Event, KeyState, Rules, next_timer, step


def rules(**kw) -> Rules:
    base = dict(lower=-10, upper=5, outer=True, one_to_one=False, per_key_cap=None, max_drift=2)
    return Rules(**{**base, **kw})


def ev(name: str, t: int, arrival: int | None = None, offset: int = 0) -> Event:
    return Event(t=t, arrival=t if arrival is None else arrival, partition=0, offset=offset, id=name, row=(name,))


def pairs(out) -> list[tuple[str, str | None]]:
    return sorted((left[0], None if right is None else right[0]) for left, right in out.pairs)


def test_one_to_n_emits_a_left_events_pairs_when_the_right_pt_passes_its_window():
    s, r = KeyState(), rules()
    out = step(s, r, [ev("L", 100)], [ev("R1", 92), ev("R2", 104), ev("R3", 106), ev("R0", 89)], None, None)
    assert out.pairs == [] and len(s.lefts) == 1  # no clock yet: nothing closes
    assert pairs(step(s, r, [], [], 95, 104)) == []  # 104 < 100 + 5: the window is still open
    out = step(s, r, [], [], 95, 105)
    assert pairs(out) == [("L", "R1"), ("L", "R2")] and s.lefts == []  # bounds inclusive: 90 <= t <= 105


def test_a_left_event_with_no_match_is_a_non_match_in_a_left_outer_join_and_nothing_in_an_inner_one():
    for outer, expected in ((True, [("L", None)]), (False, [])):
        s = KeyState()
        assert pairs(step(s, rules(outer=outer), [ev("L", 100)], [ev("R", 200)], 50, 105)) == expected
        assert s.lefts == []


def test_one_to_one_emits_the_first_arrived_match_at_once_and_keeps_nothing_more_for_it():
    s, r = KeyState(), rules(one_to_one=True)
    # R_late happened first but arrived after R_first: arrival order decides
    out = step(s, r, [ev("L", 100)], [ev("R_late", 95, arrival=120), ev("R_first", 101, arrival=110)], None, None)
    assert pairs(out) == [("L", "R_first")] and s.lefts == []
    assert pairs(step(s, r, [], [ev("R_more", 102)], 100, 200)) == []  # the left event is done
    s = KeyState()
    step(s, r, [ev("L2", 100)], [], None, None)
    assert pairs(step(s, r, [], [ev("R", 103, arrival=130)], None, None)) == [("L2", "R")]  # a later right: at once
    s = KeyState()
    step(s, r, [ev("L3", 100)], [], None, None)
    assert pairs(step(s, r, [], [], 95, 105)) == [("L3", None)]  # no match by the window's close


def test_a_left_event_read_after_its_window_closed_takes_what_is_buffered_and_closes_at_once():
    s, r = KeyState(), rules()
    step(s, r, [], [ev("R", 99)], 80, 100)
    out = step(s, r, [ev("L_late", 95), ev("L_open", 99)], [], 80, 100)
    assert pairs(out) == [("L_late", "R")] and out.counts == {"left_late_closed": 1}
    assert [e.id for e in s.lefts] == ["L_open"]


def test_a_one_to_one_left_event_read_after_its_window_closed_is_counted_late_when_matched_at_once_too():
    s, r = KeyState(), rules(one_to_one=True)
    step(s, r, [], [ev("R", 99)], 80, 100)
    out = step(s, r, [ev("L_late", 95)], [], 80, 100)  # nothing stays open: the count must not go with it
    assert pairs(out) == [("L_late", "R")] and s.lefts == [] and out.counts == {"left_late_closed": 1}


def test_a_right_event_is_kept_while_a_left_event_can_match_it_and_dropped_on_arrival_when_none_can():
    s, r = KeyState(), rules()
    step(s, r, [ev("L", 100)], [], 100, 101)
    out = step(s, r, [], [ev("R_old", 89), ev("R_ok", 95)], 120, 101)  # left PT 120, but L (100) is open
    assert out.counts == {"right_late_dropped": 1} and [e.id for e in s.rights] == ["R_ok"]
    step(s, r, [], [], 120, 105)  # L closes: only the left PT holds R_ok now
    assert s.rights == []  # 95 < 120 - 10


def test_a_timer_bounds_the_left_pt_by_the_right_pt_less_the_window_end_and_the_drift():
    s, r = KeyState(), rules()
    step(s, r, [], [ev("R", 100)], None, None)
    assert next_timer(s, r) == 100 + 10 + 5 + 2 + 1  # the first right PT at which left PT > 100 + 10 for sure
    step(s, r, [], [], None, 117)
    assert len(s.rights) == 1  # left PT >= 117 - 7 = 110: a left event at 110 still matches 100
    step(s, r, [], [], None, 118)
    assert s.rights == []
    s = KeyState()
    step(s, r, [ev("L", 100)], [], None, None)
    assert next_timer(s, r) == 105  # its window's close


def test_per_key_caps_close_the_oldest_left_event_and_evict_the_oldest_right_event():
    s, r = KeyState(), rules(per_key_cap=2)
    out = step(s, r, [], [ev("R1", 100), ev("R2", 98), ev("R3", 101)], None, None)
    assert out.counts == {"right_cap_evicted": 1} and sorted(e.id for e in s.rights) == ["R1", "R3"]
    out = step(s, r, [ev("L1", 100), ev("L2", 99), ev("L3", 102)], [], None, None)
    assert out.counts == {"left_cap_closed": 1} and pairs(out) == [("L2", "R1"), ("L2", "R3")]  # its matches so far
    assert sorted(e.id for e in s.lefts) == ["L1", "L3"]


def test_a_re_sent_record_is_dropped_and_counted_while_its_window_can_still_be_joined():
    s, r = KeyState(), rules()
    out = step(s, r, [ev("L", 100), ev("L", 100)], [ev("R", 101)], None, None)
    assert out.counts == {"left_duplicates": 1}
    out = step(s, r, [ev("L", 100)], [ev("R", 101)], None, None)
    assert out.counts == {"left_duplicates": 1, "right_duplicates": 1}
    assert pairs(step(s, r, [], [], 100, 105)) == [("L", "R")]
    step(s, r, [], [], None, 10_000)  # the right PT alone says nothing of the left stream's: kept
    assert set(s.seen) == {("l", "L"), ("r", "R")} and next_timer(s, r) == 101 + 10 + 2 + 5 + 1  # R's id, then L's
    step(s, r, [], [], 10_000, 10_005)  # the left PT long after: the ids are forgotten, the state is empty
    assert s.empty() and next_timer(s, r) is None


def test_a_left_event_re_sent_after_its_window_closed_is_not_joined_again():
    """Its copy is read once the left stream resumes, while the clicks of its window are still
    buffered; the right PT ran far ahead meanwhile (the left was idle: a replay slice's end), so a
    bound of the left PT derived from it would have let the id go (four duplicate pairs in the
    demo)."""
    s, r = KeyState(), rules()
    step(s, r, [ev("L", 100)], [ev("R", 101)], 100, 103)
    assert pairs(step(s, r, [], [], 100, 300)) == [("L", "R")] and s.rights  # R may still match later lefts
    out = step(s, r, [ev("L", 100, arrival=110)], [], 104, 300)  # the left stream resumes: its PT is 104
    assert out.pairs == [] and out.counts == {"left_duplicates": 1}


def test_a_re_sent_record_read_in_a_micro_batch_whose_pts_jump_past_it_is_still_a_duplicate():
    # the copy arrives 8 later, in a micro-batch whose right PT (a backlog, a long replay slice)
    # passes both its window's end and the point where its id would be forgotten
    s, r = KeyState(), rules()
    step(s, r, [ev("L", 100)], [ev("R", 101)], 100, 104)
    out = step(s, r, [ev("L", 100, arrival=108)], [], 100, 10_000)
    assert pairs(out) == [("L", "R")] and out.counts == {"left_duplicates": 1}  # once, not twice
    s = KeyState()
    assert pairs(step(s, r, [ev("L", 100)], [ev("R", 101)], 100, 105)) == [("L", "R")]  # closed
    out = step(s, r, [ev("L", 100, arrival=108)], [], 100, 10_000)
    assert out.pairs == [] and out.counts == {"left_duplicates": 1}


def test_a_non_match_is_amended_by_a_right_event_of_its_window_within_the_horizon():
    s, r = KeyState(), rules(horizon=20)
    assert pairs(step(s, r, [ev("L", 100)], [], 95, 105)) == [("L", None)]  # closed: a non-match
    out = step(s, r, [], [ev("R1", 103, arrival=110), ev("R_out", 120)], 95, 110)  # R_out: not in its window
    assert out.corrections == [(("L",), ("R1",), 1)] and out.counts == {"left_amended": 1}
    out = step(s, r, [], [ev("R2", 91, arrival=115)], 95, 115)
    assert out.corrections == [(("L",), ("R2",), 2)]  # 1-to-n: each late partner, revision by revision
    step(s, r, [], [], 95, 125)  # the right PT passes 100 + 5 + 20: the horizon is over
    assert s.amendable == [] and step(s, r, [], [ev("R3", 102, arrival=130)], 95, 126).corrections == []


def test_one_to_one_amends_a_non_match_once_with_the_first_arrived_late_match():
    s, r = KeyState(), rules(horizon=20, one_to_one=True)
    step(s, r, [ev("L", 100)], [], 95, 105)
    out = step(s, r, [], [ev("Rb", 104, arrival=112), ev("Ra", 99, arrival=111)], 95, 110)
    assert out.corrections == [(("L",), ("Ra",), 1)] and s.amendable == []
    assert next_timer(s, r) is not None  # the right events stay buffered for other left events


def test_without_a_horizon_nothing_is_amended():
    s, r = KeyState(), rules()
    step(s, r, [ev("L", 100)], [], 95, 105)
    assert step(s, r, [], [ev("R1", 103, arrival=110)], 95, 110).corrections == [] and s.amendable == []
