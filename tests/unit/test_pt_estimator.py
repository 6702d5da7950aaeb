"""Processing-time estimation (paper §5.2, §5.3 / Figure 7, §7.4 / Figure 12)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from jobs.accuracy.lateness import lateness_behind_pt, recommend_watermark_delay, share_behind_pt, synchronization_gap
from jobs.join.pt_estimator import SERIES_COLUMNS, PTEstimator, PTState, micro_batches, pt_series, window_statistics

# Figure 7: one event per micro-batch, PT statistic = mean, ascending sequence of 4 windows.
FIG7 = [2, 3, 1, 2, 4, 1, 3, 5, 3, 4, 7, 5, 6, 4, 8, 7]
FIG7_ROWS = {
    1: FIG7,
    2: [2.5, 1.5, 2.5, 4, 3.5, 6, 5, 7.5],
    4: [2, 3.25, 4.75, 6.25],
}

HOUR = 3_600_000
MINUTE = 60_000


def _ascending(values) -> bool:
    return bool(np.all(np.diff(np.asarray(values, dtype=float)) > 0))


def _stream(rng, rate_per_s, hours, delay_ms, warm_hours=0.0):
    """A stream observed for ``hours`` of wall clock: events uniform in event time (starting
    ``warm_hours`` earlier, so the observed window is stationary), arrival = event + delay."""
    start, end = -warm_hours * HOUR, hours * HOUR
    n = int(rate_per_s * (hours + warm_hours) * 3600)
    event = rng.uniform(start, end, n)
    arrival = event + delay_ms(n)
    keep = (arrival >= 0) & (arrival < end)
    return arrival[keep].astype(np.int64), event[keep].astype(np.int64)


def _steady(df: pd.DataFrame, skip: float = 0.25) -> pd.DataFrame:
    return df.iloc[int(len(df) * skip) :]


# --------------------------------------------------------------------------------------------
# Figure 7
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4])
def test_figure7_rows(k):
    row = window_statistics([[v] for v in FIG7], k, "mean")
    np.testing.assert_allclose(row, FIG7_ROWS[k])


def test_figure7_ascending_flags():
    # w and 2w (the most recent 4 windows, and the whole rows) are not ascending; 4w is.
    assert not _ascending(FIG7_ROWS[1][-4:]) and not _ascending(FIG7_ROWS[1])
    assert not _ascending(FIG7_ROWS[2][-4:]) and not _ascending(FIG7_ROWS[2])
    assert _ascending(FIG7_ROWS[4])


def test_figure7_estimator_finds_4w_and_pt_6_25():
    est = PTEstimator(sequence_length=4, statistic="mean", max_window=8)
    states = [est.update([v]) for v in FIG7]
    # No size is ascending before the 16th micro-batch completes the 4th window of 4w.
    for st in states[:-1]:
        assert st.pt is None and not st.ascending and st.window_batches == 8
    assert states[-1] == PTState(pt=6.25, window_batches=4, ascending=True, batches=16)
    levels = est.level_statistics()
    assert levels[1] == tuple(FIG7[-4:])
    assert levels[2] == tuple(FIG7_ROWS[2][-4:])
    assert levels[4] == tuple(FIG7_ROWS[4])


def test_figure7_through_pt_series():
    # One event per 1-s micro-batch: the last row is Figure 7's outcome.
    arrival = np.arange(16) * 1000 + 500
    df = pt_series(arrival, np.asarray(FIG7) * 1.0, 1000, sequence_length=4, statistic="mean", max_window=4)
    assert df["pt_ms"].iloc[:-1].isna().all()
    assert df["pt_ms"].iloc[-1] == 6.25
    assert df["window_batches"].iloc[-1] == 4
    assert df["batch_end_ms"].iloc[-1] == 16_000
    assert df["pt_delay_ms"].iloc[-1] == 16_000 - 6.25


def test_linear_growth_finds_a_smaller_window_sooner():
    # Windows of 3 micro-batches: 2, 2.33, 3.67, 5.33 are ascending after the 12th micro-batch.
    est = PTEstimator(sequence_length=4, statistic="mean", max_window=4, growth="linear")
    states = [est.update([v]) for v in FIG7]
    first = next(i for i, st in enumerate(states) if st.pt is not None)
    assert first == 11
    assert states[first].window_batches == 3
    assert states[first].pt == pytest.approx(16 / 3)
    assert est.levels == (1, 2, 3, 4)


def test_window_levels_double_and_include_max_window():
    assert PTEstimator(max_window=64).levels == (1, 2, 4, 8, 16, 32, 64)
    assert PTEstimator(max_window=12).levels == (1, 2, 4, 8, 12)
    assert PTEstimator(max_window=1).levels == (1,)


# --------------------------------------------------------------------------------------------
# Estimator semantics
# --------------------------------------------------------------------------------------------


def test_percentile_statistic_matches_numpy():
    rng = np.random.default_rng(3)
    batches = [rng.normal(i * 10.0, 30.0, rng.integers(1, 50)) for i in range(32)]
    for q in (0.0, 5.0, 37.5, 50.0, 100.0):
        est = PTEstimator(sequence_length=3, statistic=q, max_window=8)
        for b in batches:
            est.update(b)
        for k, stats in est.level_statistics().items():
            expected = [
                np.percentile(np.concatenate(batches[j * k : (j + 1) * k]), q) for j in range(len(batches) // k)
            ][-3:]
            np.testing.assert_allclose(stats, expected, rtol=0, atol=1e-9)
            np.testing.assert_allclose(window_statistics(batches, k, q)[-3:], expected, rtol=0, atol=1e-9)
    assert window_statistics(batches, 4, "median")[0] == pytest.approx(np.median(np.concatenate(batches[:4])))


def test_pt_never_decreases():
    rng = np.random.default_rng(7)
    # Heavy-tailed, bursty delays: plenty of non-ascending stretches and window changes.
    a, e = _stream(rng, 5, 6, lambda n: rng.pareto(1.2, n) * 20_000, warm_hours=2)
    for statistic in (5.0, "mean", 50.0):
        df = pt_series(a, e, 30_000, sequence_length=4, statistic=statistic, max_window=16)
        pt = df["pt_ms"].to_numpy()
        known = ~np.isnan(pt)
        assert known.any()
        first = np.argmax(known)
        assert known[first:].all(), "once known, PT stays known"
        assert np.all(np.diff(pt[first:]) >= 0)
        assert df["window_batches"].nunique() > 1


def test_pt_is_kept_when_a_bigger_window_is_lower():
    # PT is a low watermark: an ascending sequence whose newest statistic is below the current
    # PT does not move it back.
    est = PTEstimator(sequence_length=2, statistic="mean", max_window=2)
    est.update([1])
    st = est.update([10])
    assert st.pt == 10 and st.window_batches == 1
    st = est.update([2])  # level 1: 10, 2 not ascending; level 2 has only one window
    assert st == PTState(pt=10, window_batches=2, ascending=False, batches=3)
    st = est.update([7])  # level 1: 2 < 7 ascending, candidate 7 < 10; level 2: 5.5, 4.5
    assert st == PTState(pt=10, window_batches=1, ascending=True, batches=4)
    assert est.level_statistics()[2] == (5.5, 4.5)
    assert est.update([30]).pt == 30


def test_empty_micro_batch_leaves_state_unchanged():
    est = PTEstimator(sequence_length=2, statistic="mean", max_window=4)
    est.update([1.0])
    before = est.update([2.0])
    assert est.update([]) is before
    assert est.update(np.array([], dtype=np.int64)).batches == 2


def test_update_copies_its_input():
    est = PTEstimator(sequence_length=2, statistic=50.0, max_window=2)
    buf = np.array([1.0, 2.0, 3.0])
    est.update(buf)
    buf[:] = 100.0
    st = est.update(buf)
    assert st.pt == 100.0 and est.level_statistics()[1] == (2.0, 100.0)


# --------------------------------------------------------------------------------------------
# Figure 12: ordered vs disordered streams, accuracy
# --------------------------------------------------------------------------------------------


def test_in_order_stream_uses_window_1_and_small_delay():
    rng = np.random.default_rng(11)
    arrival = np.sort(rng.uniform(0, HOUR, 50 * 3600)).astype(np.int64)
    event = arrival - 200 - rng.integers(0, 50, arrival.size)
    df = pt_series(arrival, event, 2_000, sequence_length=5, statistic=5.0)
    steady = df[df["pt_ms"].notna()]
    assert len(steady) > 0.99 * len(df)
    assert (steady["window_batches"] == 1).all()
    assert steady["ascending"].all()
    # PT trails the wall clock by about one micro-batch plus the ingestion latency.
    assert steady["pt_delay_ms"].max() <= 2_000 + 300
    assert steady["accuracy"].min() == 1.0


def test_disordered_stream_needs_bigger_windows_and_lags_more():
    """Figure 12: Stream A (client logs, heavy-tailed upload delays) vs Stream B (servers)."""
    rng = np.random.default_rng(12)
    params = dict(sequence_length=5, statistic=5.0, max_window=64)
    b_arr, b_ev = _stream(rng, 20, 3, lambda n: rng.exponential(1_000, n), warm_hours=1)
    a_arr, a_ev = _stream(rng, 20, 3, lambda n: rng.lognormal(math.log(60_000), 2.0, n), warm_hours=10)
    b = _steady(pt_series(b_arr, b_ev, 10_000, **params))
    a = _steady(pt_series(a_arr, a_ev, 10_000, **params))

    assert (b["window_batches"] == 1).mean() > 0.95
    assert a["window_batches"].median() >= 8
    assert b["pt_delay_ms"].median() < 20_000
    assert a["pt_delay_ms"].median() > 10 * MINUTE
    assert a["pt_delay_ms"].median() > 30 * b["pt_delay_ms"].median()
    # Both keep a good accuracy: the window adapts to the disorder.
    assert a["accuracy"].mean() > 0.9 and b["accuracy"].mean() > 0.99


@pytest.mark.parametrize("percentile", [5.0, 25.0])
def test_accuracy_near_one_minus_percentile_on_stationary_stream(percentile):
    # Upload delays ~ exponential(1 h) >> micro-batch (1 min): the event-time distribution of a
    # micro-batch barely moves between windows, so about `percentile` % fall behind PT.
    rng = np.random.default_rng(13)
    arr, ev = _stream(rng, 20, 4, lambda n: rng.exponential(HOUR, n), warm_hours=15)
    df = _steady(pt_series(arr, ev, MINUTE, sequence_length=5, statistic=percentile))
    expected = 1 - percentile / 100
    assert df["accuracy"].mean() == pytest.approx(expected, abs=0.03)
    overall = 1 - df["behind_pt"].sum() / df["next_tuples"].sum()
    assert overall == pytest.approx(expected, abs=0.03)
    assert overall >= expected - 0.005  # PT lags the newest events: slightly conservative


# --------------------------------------------------------------------------------------------
# Series shape, micro-batches
# --------------------------------------------------------------------------------------------


def test_micro_batches_split_by_arrival_including_empty_ones():
    arrival = np.array([2_500, 100, 1_100, 5_900, 1_900, 300])
    event = np.array([25, 1, 11, 59, 19, 3])
    batches = micro_batches(arrival, event, 1_000)
    assert [b.tolist() for b in batches] == [[1, 3], [11, 19], [25], [], [], [59]]
    shifted = micro_batches(arrival, event, 1_000, origin_ms=-500)
    assert [b.tolist() for b in shifted] == [[1, 3], [11], [19], [25], [], [], [59]]


def test_pt_series_columns_and_accuracy_bookkeeping():
    rng = np.random.default_rng(21)
    arr, ev = _stream(rng, 10, 1, lambda n: rng.exponential(30_000, n), warm_hours=0.5)
    order = rng.permutation(arr.size)  # input order must not matter
    df = pt_series(arr[order], ev[order], 5_000, sequence_length=4, statistic=10.0)
    ref = pt_series(arr, ev, 5_000, sequence_length=4, statistic=10.0)
    pd.testing.assert_frame_equal(df, ref)
    assert tuple(df.columns) == SERIES_COLUMNS
    assert df["tuples"].sum() == arr.size
    assert (df["batch_end_ms"] - df["batch_start_ms"] == 5_000).all()
    assert (df["next_tuples"].iloc[:-1].to_numpy() == df["tuples"].iloc[1:].to_numpy()).all()
    np.testing.assert_allclose(df["pt_delay_ms"], df["batch_end_ms"] - df["pt_ms"])
    # Accuracy: the next micro-batch's tuples with event time >= this PT.
    batches = micro_batches(arr, ev, 5_000)
    i = int(df["pt_ms"].notna().to_numpy().argmax()) + 3
    nxt = batches[i + 1]
    pt = df["pt_ms"].iloc[i]
    assert df["behind_pt"].iloc[i] == int((nxt < pt).sum())
    assert df["accuracy"].iloc[i] == pytest.approx((nxt >= pt).mean())
    assert np.isnan(df["accuracy"].iloc[-1])
    assert df.attrs["batch_ms"] == 5_000 and df.attrs["sequence_length"] == 4


def test_pt_series_empty_input():
    df = pt_series(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 1_000)
    assert len(df) == 0 and tuple(df.columns) == SERIES_COLUMNS


def test_pt_series_over_a_day_of_heavy_tailed_delays_counts_every_tuple_once():
    rng = np.random.default_rng(5)
    arr, ev = _stream(rng, 25, 6, lambda n: rng.lognormal(math.log(60_000), 2.0, n), 2)
    assert arr.size > 400_000
    df = pt_series(arr, ev, MINUTE)
    assert df["tuples"].sum() == arr.size
    assert (df["batch_end_ms"] - df["batch_start_ms"] == MINUTE).all()
    assert len(df) == (arr.max() // MINUTE) - (arr.min() // MINUTE) + 1  # every minute, empty ones too


# --------------------------------------------------------------------------------------------
# Watermark advice, synchronization
# --------------------------------------------------------------------------------------------


def test_recommend_watermark_delay_exact_small_case():
    lateness = np.arange(100.0)  # 0 .. 99 ms
    assert recommend_watermark_delay(lateness, 0.10) == 89  # drops 90..99: exactly 10 %
    assert share_behind_pt(lateness, 89) == pytest.approx(0.10)
    assert share_behind_pt(lateness, 88) > 0.10
    assert recommend_watermark_delay(lateness, 0.0) == 99
    assert recommend_watermark_delay(lateness, 1.0) == 0
    assert recommend_watermark_delay([-5.0, -1.0, np.nan], 0.0) == 0  # nobody late
    assert recommend_watermark_delay([], 0.1) == 0
    assert recommend_watermark_delay([0.2, 0.4, np.nan], 0.0) == 1  # rounds up


def test_recommend_watermark_delay_exponential_quantile():
    rng = np.random.default_rng(31)
    mean = 90_000.0
    lateness = rng.exponential(mean, 200_000)
    for target in (0.01, 0.05, 0.2):
        d = recommend_watermark_delay(lateness, target)
        assert d == pytest.approx(-mean * math.log(target), rel=0.03)
        assert share_behind_pt(lateness, d) <= target
        assert share_behind_pt(lateness, d - 1) > target  # the smallest such delay


def test_lateness_behind_pt_agrees_with_series():
    rng = np.random.default_rng(41)
    arr, ev = _stream(rng, 10, 2, lambda n: rng.lognormal(math.log(20_000), 1.5, n), 3)
    df = pt_series(arr, ev, 10_000, statistic=5.0)
    lat = lateness_behind_pt(df, arr, ev)
    assert lat.shape == arr.shape
    known = df["pt_ms"].notna()
    # Tuples that arrived while a PT was in force are exactly the next_tuples of PT rows.
    assert np.count_nonzero(~np.isnan(lat)) == df.loc[known, "next_tuples"].sum()
    assert np.count_nonzero(lat > 0) == df["behind_pt"].sum()
    assert share_behind_pt(lat) == pytest.approx(df["behind_pt"].sum() / df.loc[known, "next_tuples"].sum())
    d = recommend_watermark_delay(lat, 0.001)
    assert d > 0 and share_behind_pt(lat, d) <= 0.001


def test_synchronization_gap():
    # Window [-3 min, +3 min]: right PT should be left PT + 3 min.
    assert synchronization_gap(10 * MINUTE, 13 * MINUTE, 3 * MINUTE) == 0
    assert synchronization_gap(10 * MINUTE, 15 * MINUTE, 3 * MINUTE) == 2 * MINUTE  # ahead
    assert synchronization_gap(10 * MINUTE, 12 * MINUTE, 3 * MINUTE) == -MINUTE  # behind
    assert synchronization_gap(None, 1.0, 0) is None
    gaps = synchronization_gap(np.array([0.0, 10.0, np.nan]), np.array([5.0, 5.0, 5.0]), 5)
    np.testing.assert_array_equal(gaps[:2], [0.0, -10.0])
    assert np.isnan(gaps[2])


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(sequence_length=1), "sequence_length"),
        (dict(sequence_length=2.5), "sequence_length"),
        (dict(sequence_length=True), "sequence_length"),
        (dict(max_window=0), "max_window"),
        (dict(max_window="8"), "max_window"),
        (dict(statistic="p5"), "statistic"),
        (dict(statistic=101), "statistic"),
        (dict(statistic=-1.0), "statistic"),
        (dict(statistic=None), "statistic"),
        (dict(growth="triple"), "growth"),
    ],
)
def test_invalid_estimator_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PTEstimator(**kwargs)
    with pytest.raises(ValueError, match=name):
        pt_series(np.array([1, 2]), np.array([1, 2]), 1_000, **kwargs)


def test_invalid_inputs():
    a = np.array([1, 2, 3])
    with pytest.raises(ValueError, match="batch_ms"):
        pt_series(a, a, 0)
    with pytest.raises(ValueError, match="batch_ms"):
        micro_batches(a, a, -5)
    with pytest.raises(ValueError, match="same length"):
        pt_series(a, a[:2], 1_000)
    with pytest.raises(ValueError, match="event_ms"):
        pt_series(a, np.array([1.0, np.nan, 3.0]), 1_000)
    with pytest.raises(ValueError, match="origin_ms"):
        micro_batches(a, a, 1_000, origin_ms=2)
    with pytest.raises(ValueError, match="event_times"):
        PTEstimator().update([1.0, np.inf])
    with pytest.raises(ValueError, match="window_batches"):
        window_statistics([[1.0]], 0)
    with pytest.raises(ValueError, match="target_drop_rate"):
        recommend_watermark_delay([1.0], 1.5)
    with pytest.raises(ValueError, match="target_drop_rate"):
        recommend_watermark_delay([1.0], -0.1)
    with pytest.raises(ValueError, match="delay_ms"):
        share_behind_pt([1.0], -1)
    with pytest.raises(ValueError, match="pt_ms"):
        lateness_behind_pt(pd.DataFrame({"batch_end_ms": [1]}), a, a)
