"""The paced engine's prediction (jobs.accuracy.paced_model): its pacing and operator run over records."""

from dataclasses import replace

import numpy as np
import pytest

from jobs.accuracy.paced_model import Pacing, Records, evaluate_paced, paced_batches, run_operator
from jobs.join.paced import Rules
from jobs.join.pacing import DRAIN_PT

T0 = 1_763_510_400_000  # 2025-11-19 00:00 UTC
MIN = 60_000
PACING = Pacing(batch_ms=30 * MIN, drift_ms=10 * MIN, percentile=5.0, pt_windows=5, max_records=50_000)
RULES = Rules(lower=0, upper=0, outer=True, one_to_one=True, per_key_cap=None, max_drift=10 * MIN)


def streams(n=3000, seed=3, click_delay_ms=2_000, late=()):
    """One left event a key over a day; 90% with a click 0-10 min later, arriving ``click_delay_ms``
    after it; ``late``: (left index, arrival delay) of clicks that arrive that late instead."""
    rng = np.random.default_rng(seed)
    lt = T0 + np.sort(rng.integers(0, 86_400_000, n))
    keys = [f"k{i}" for i in range(n)]
    has = rng.random(n) < 0.9
    idx = np.flatnonzero(has)
    rt = lt[idx] + rng.integers(0, 10 * MIN, len(idx))
    ra = rt + click_delay_ms
    for i, delay in late:
        j = int(np.searchsorted(idx, i))
        assert idx[j] == i, "give a left event that has a click"
        ra[j] = rt[j] + delay
    left = Records(keys, lt, lt + 1_000, [f"l{i}" for i in range(n)])
    right = Records([keys[i] for i in idx], rt, ra, [f"r{i}" for i in range(len(idx))])
    return left, right


def brute_force(left, right, lower_ms, upper_ms):
    by_key = {}
    for k, t in zip(right.keys, right.t_ms):
        by_key.setdefault(k, []).append(t)
    return np.array(
        [any(lt + lower_ms <= t <= lt + upper_ms for t in by_key.get(k, [])) for k, lt in zip(left.keys, left.t_ms)]
    )


def test_every_record_is_admitted_once_and_the_run_ends_drained():
    left, right = streams(n=1500)
    batches = paced_batches(left, right, 10 * MIN, PACING)
    assert sorted(i for b in batches for i in b.left) == list(range(len(left)))
    assert sorted(j for b in batches for j in b.right) == list(range(len(right)))
    assert (batches[-1].left_pt, batches[-1].right_pt) == (DRAIN_PT, DRAIN_PT)
    pts = [b.right_pt for b in batches if b.right_pt is not None]
    assert pts == sorted(pts), "PT never moves back"
    # paced: the left stream runs ahead (its clicks come minutes after it), so some left events
    # arrive in one slice and are admitted by a later micro-batch
    slice_end = (left.arrival_ms // PACING.batch_ms + 1) * PACING.batch_ms
    held_back = [i for b in batches for i in b.left if b.end_ms > slice_end[i]]
    assert held_back and not [j for b in batches for j in b.right if b.end_ms < right.arrival_ms[j]]


def test_on_records_that_arrive_on_time_the_model_finds_every_match_of_the_window():
    left, right = streams()
    rules = replace(RULES, lower=-10 * MIN, upper=10 * MIN)
    ans = run_operator(paced_batches(left, right, rules.upper, PACING), left, right, rules)
    expected = brute_force(left, right, rules.lower, rules.upper)
    assert ans.decided.all()
    assert np.array_equal(ans.final_matched, expected)
    assert np.array_equal(ans.first_matched, expected)
    assert 0.85 < expected.mean() < 0.95


def test_a_click_read_after_its_window_closed_is_lost_and_a_late_correction_recovers_it():
    late = [(1000, 6 * 3_600_000)]  # left event 1000's click arrives 6 h after it happened
    left, right = streams(late=late)
    no_horizon = replace(RULES, lower=-10 * MIN, upper=10 * MIN)
    batches = paced_batches(left, right, no_horizon.upper, PACING)
    ans = run_operator(batches, left, right, no_horizon)
    assert not ans.final_matched[1000] and ans.decided[1000]
    assert ans.counts.get("right_late_dropped", 0) >= 1
    amended = run_operator(batches, left, right, replace(no_horizon, horizon=12 * 3_600_000))
    assert amended.final_matched[1000] and not amended.first_matched[1000]
    others = np.arange(len(left)) != 1000
    assert np.array_equal(amended.final_matched[others], ans.final_matched[others])


def test_the_grid_gives_a_row_per_window_and_a_wider_window_holds_more():
    left, right = streams()
    windows = [(-600, 600), (-3 * 3600, 1800)]
    grid, answers = evaluate_paced(
        left,
        right,
        windows,
        RULES,
        PACING,
        in_days=np.ones(len(left), dtype=bool),
        window_rate={},
        bytes_per_event=80.0,
    )
    assert [tuple(w) for w in grid[["lower_s", "upper_s"]].to_numpy()] == sorted(windows, key=lambda w: w[1])
    narrow, wide = (grid.set_index(["lower_s", "upper_s"]).loc[w] for w in windows)
    assert wide.memory_bytes > narrow.memory_bytes > 0
    assert narrow.memory_bytes == answers[(-600, 600)].peak_events * 80.0
    assert (grid.left_delay_s == 0).all() and (grid.right_delay_s == 0).all()
    # first answers come after the window's upper bound at most a slice and the PT's lag later
    assert 0 < narrow.p99_latency_s < 600 + 2 * PACING.batch_ms / 1000 + 3600
    assert grid.match_rate.between(0, 1).all() and (grid.first_answer_rate <= grid.match_rate).all()


def test_a_live_prediction_leaves_the_drains_rows_out_of_the_latency():
    """A trial ends with a drain, whose rows wait for the run's end; a live stream never drains."""
    left, right = streams(n=1500)
    rules = replace(RULES, lower=-10 * MIN, upper=10 * MIN)
    batches = paced_batches(left, right, rules.upper, PACING)
    trial = run_operator(batches, left, right, rules)
    live = run_operator(batches, left, right, rules, drain_latency=False)
    assert trial.micro_batches == len(batches) and [b.drain for b in batches[-2:]] == [False, True]
    assert np.array_equal(trial.final_matched, live.final_matched)  # the same answers ...
    drained = len(trial.latency_s) - len(live.latency_s)
    assert drained > 0  # ... the last windows, which the drain closed, are the rows left out
    assert live.latency_s == trial.latency_s[:-drained] and live.latency_left == trial.latency_left[:-drained]


@pytest.mark.parametrize(
    "left_lateness_ms, right_lateness_ms, keys, batch_ms, rules",
    [
        (MIN, 50 * MIN, None, MIN, replace(RULES, lower=-15 * MIN, upper=15 * MIN, horizon=24 * 3_600_000)),
        (
            30 * MIN,
            10 * MIN,
            800,
            5 * MIN,
            replace(RULES, lower=-10 * MIN, upper=10 * MIN, one_to_one=False, per_key_cap=3),
        ),
        (10 * MIN, 120 * MIN, 2000, MIN, replace(RULES, lower=-10 * MIN, upper=10 * MIN, horizon=2 * 3_600_000)),
    ],
)
def test_skipping_the_idle_timers_gives_the_engines_answers(left_lateness_ms, right_lateness_ms, keys, batch_ms, rules):
    """A key whose timer fires while nothing can change it is not stepped (the engine steps it, to
    no effect): the same answers, counters, state peak and latencies as stepping it every time."""
    left, right = random_streams(5, keys or 6000, left_lateness_ms, right_lateness_ms)
    pacing = replace(PACING, batch_ms=batch_ms, percentile=50.0 if rules.per_key_cap else PACING.percentile)
    every = assert_idle_steps_change_nothing(paced_batches(left, right, rules.upper, pacing), left, right, rules)
    late = {"right_late_dropped", "left_late_closed", "left_amended", "right_cap_evicted"}
    assert every.counts.get("right_late_dropped") and len(late & every.counts.keys()) >= 2  # what idle steps could move


def random_streams(seed, keys, left_lateness_ms, right_lateness_ms, *, n=6000, t0=T0):
    """``n`` left events over a day on ``keys`` keys, 90% with a click within 15 min either side,
    both arriving exponentially late."""
    rng = np.random.default_rng(seed)
    lt = t0 + np.sort(rng.integers(0, 86_400_000, n))
    la = lt + rng.exponential(left_lateness_ms, n).astype(np.int64)
    key = [f"k{rng.integers(0, keys)}" for _ in range(n)]
    has = rng.random(n) < 0.9
    rt = lt[has] + rng.integers(-15 * MIN, 15 * MIN, int(has.sum()))
    ra = rt + rng.exponential(right_lateness_ms, len(rt)).astype(np.int64)
    rkeys = [k for k, h in zip(key, has) if h]
    return (
        Records(key, lt, la, [f"l{i}" for i in range(n)]),
        Records(rkeys, rt, ra, [f"r{i}" for i in range(len(rt))]),
    )


def assert_idle_steps_change_nothing(batches, left, right, rules):
    every = run_operator(batches, left, right, rules, skip_idle=False)
    skipped = run_operator(batches, left, right, rules)
    for name in ("first_matched", "final_matched", "decided"):
        assert np.array_equal(getattr(every, name), getattr(skipped, name)), name
    assert every.counts == skipped.counts and every.peak_events == skipped.peak_events
    assert sorted(zip(every.latency_left, every.latency_s)) == sorted(zip(skipped.latency_left, skipped.latency_s))
    return every


def test_a_key_stepped_before_the_left_pt_is_known_is_stepped_as_the_engine_steps_it():
    """Keys stepped while the left PT is unknown go by the bound the right PT gives: skipping idle
    timers must not park them for good."""
    left, right = random_streams(1, 800, 30 * MIN, 10 * MIN, t0=1_700_000_000_000)
    rules = replace(RULES, lower=-10 * MIN, upper=10 * MIN, one_to_one=False, per_key_cap=3)
    batches = paced_batches(left, right, rules.upper, replace(PACING, batch_ms=5 * MIN, percentile=50.0))
    assert_idle_steps_change_nothing(batches, left, right, rules)
