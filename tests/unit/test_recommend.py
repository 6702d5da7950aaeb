"""The recommendation's model on numbers worked out by hand: which records the watermark drops,
what every candidate matches and how late its rows leave, the frontier, the choice under
budgets, what to relax, and honesty about small samples."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from jobs.accuracy import frontier
from jobs.accuracy.lateness import (
    NO_MAX,
    Cadence,
    batch_clock,
    behind_maxima,
    quantile_basis,
    recommend_watermark_delay,
    survives,
)
from jobs.accuracy.recommend import boundary_reasons
from jobs.accuracy.state_model import MemoryModel
from jobs.accuracy.tradeoff import Observed, evaluate, p99, per_ds_rates
from jobs.accuracy.verify import compare, verify_spec

MIN, H = 60, 3600
US = 1_000_000


def test_a_record_is_dropped_only_behind_both_streams_maxima_minus_their_delays():
    # behind the left max by 20m and the right max by 5m
    bl, br = np.array([20 * MIN * US]), np.array([5 * MIN * US])
    assert not survives(bl, br, 10 * MIN, 2 * MIN)[0]  # behind both (20m >= 10m, 5m >= 2m): dropped
    assert survives(bl, br, 10 * MIN, 10 * MIN)[0]  # ahead of right max − 10m: the min watermark keeps it
    assert survives(bl, br, 30 * MIN, 0)[0]  # ahead of left max − 30m: kept, whatever the right delay
    assert not survives(np.array([10 * MIN * US]), br, 10 * MIN, 5 * MIN)[0]  # AT the watermark: dropped
    assert survives(np.array([NO_MAX]), br, 0, 0)[0]  # a stream not seen yet holds the watermark at 0


def test_the_late_filter_uses_the_maxima_of_the_batch_before_the_previous_one():
    cad = Cadence(batch_s=30 * MIN, replay=True)  # late_lag 2: the previous batch's watermark
    # batch 0: left max 10:00; batch 1: left max 11:00; batch 2 reads a record at 10:30
    ms = lambda h, m=0: int((h * H + m * MIN) * 1000)  # noqa: E731
    la, le = np.array([ms(10, 1), ms(10, 31)]), np.array([ms(10), ms(11)]) * 1000
    ra, re = np.array([ms(10, 2), ms(10, 32)]), np.array([ms(10), ms(11)]) * 1000
    clock = batch_clock(cad, la, le, ra, re)
    assert clock.end_ms.tolist() == [ms(10, 30), ms(11)] and clock.max_left_us.tolist() == le.tolist()
    b = np.array([2])
    behind_l, behind_r = behind_maxima(clock, b, np.array([ms(10, 30) * 1000]), cad.late_lag)
    # judged against batch 0's maxima (10:00): it is ahead, so no delay drops it ...
    assert behind_l[0] < 0 and survives(behind_l, behind_r, 0, 0)[0]
    # ... though batch 1's maxima (11:00) would have dropped it with delays under 30m
    one_l, one_r = behind_maxima(clock, b, np.array([ms(10, 30) * 1000]), 1)
    assert one_l[0] == 30 * MIN * US and not survives(one_l, one_r, 10 * MIN, 10 * MIN)[0]
    # an empty slice runs no batch: the clock has one batch per non-empty slice
    gap = batch_clock(cad, np.array([ms(10), ms(13)]), np.array([0, 0]), np.array([ms(10)]), np.array([0]))
    assert len(gap.end_ms) == 2
    with pytest.raises(ValueError, match="slice the clock does not know"):
        gap.batch_of(np.array([ms(11)]), cad)


def _observed(left_outer: bool = True) -> Observed:
    """Three left events at 10:00 (arrive 10:00) and one click each, with offsets +5m, +20m, +5m;
    the third click arrives 3 h late. One batch per 10 minutes (live), late lag 2."""
    cad = Cadence(batch_s=10 * MIN, replay=False)
    t0 = 10 * H * 1000
    left_t = np.array([t0, t0, t0]) * 1000
    left_a = np.array([t0, t0, t0]) + 1000
    right_t = left_t + np.array([5, 20, 5]) * MIN * US
    right_a = np.array([t0 + 6 * MIN * 1000, t0 + 21 * MIN * 1000, t0 + 3 * H * 1000])
    # filler traffic every 10 minutes keeps both streams' maxima moving with arrival time
    fill_a = t0 + np.arange(0, 4 * H, 10 * MIN) * 1000 + 500
    clock = batch_clock(
        cad,
        np.r_[left_a, fill_a],
        np.r_[left_t, (fill_a - 500) * 1000],
        np.r_[right_a, fill_a],
        np.r_[right_t, (fill_a - 500) * 1000],
    )
    return Observed(
        cadence=cad,
        clock=clock,
        days=["2026-11-19"],
        left_ds=np.zeros(3, dtype=np.int64),
        left_t_us=left_t,
        left_batch=clock.batch_of(left_a, cad),
        pair_left=np.array([0, 1, 2]),
        pair_d_us=np.array([5, 20, 5]) * MIN * US,
        pair_right_t_us=right_t,
        pair_right_batch=clock.batch_of(right_a, cad),
        widest=(-H, H),
        left_outer=left_outer,
    )


def test_every_candidate_is_decided_by_window_and_both_watermarks():
    obs = _observed()
    mem = MemoryModel(1, 1, 100)
    g = evaluate(obs, [(0, 10 * MIN), (0, 30 * MIN)], [0], [0, 4 * H], mem).set_index(frontier.KEY)
    # [0, +10m] sees two clicks (+5m); with no delay the 3-hours-late click is dropped
    assert g.loc[(0, 600, 0, 0)].matched_left == 1
    assert g.loc[(0, 600, 0, 4 * H)].matched_left == 2  # a 4 h right delay keeps it (the min watermark)
    assert g.loc[(0, 1800, 0, 4 * H)].matched_left == 3
    assert g.loc[(0, 1800, 0, 0)].window_rate == 1.0  # nothing dropped: every left event has a click
    assert per_ds_rates(obs, (0, 1800), 0, 0) == {"2026-11-19": pytest.approx(2 / 3)}
    # the late click's row leaves when it arrives (batch end 13:10), 3h 5m after it happened
    late = g.loc[(0, 600, 0, 4 * H)]
    assert late.p99_latency_s == pytest.approx(3 * H + 5 * MIN, abs=30)
    # without it, the unmatched left row waits for the watermark to pass 10:00 + 10m: filler maxima
    # pass 10:10 in batch 10:10-10:20 (max 10:10), eviction one batch later -> leaves at 10:30
    assert g.loc[(0, 600, 0, 0)].p99_latency_s == pytest.approx(30 * MIN, abs=30)
    inner = evaluate(_observed(left_outer=False), [(0, 600)], [0], [0], mem)
    # inner: only the click's row, out at the end of the batch reading it (10:10) − click time (10:05)
    assert inner.p99_latency_s[0] == pytest.approx(5 * MIN, abs=30)


def test_state_grows_with_the_window_and_the_delays():
    m = MemoryModel(left_rows_per_s=2, right_rows_per_s=10, bytes_per_row=100, id_bytes_per_row=30)
    cad = Cadence(60, replay=False)
    trail = 7200 + 60  # the global watermark trails by the larger delay; eviction by one batch more
    window_rows = 10 * (H + trail) + 2 * (30 * MIN + trail)
    assert m.rows(-H, 30 * MIN, 600, 7200, cad) == window_rows
    assert m.rows(-H, 30 * MIN, 7200, 600, cad) == window_rows  # the min watermark: the larger delay counts
    ids = 2 * (600 + trail) + 10 * (7200 + trail)  # each side's ids for its own delay + the trail
    assert m.id_rows(600, 7200, cad) == ids and m.id_rows(7200, 600, cad) == 2 * (7200 + trail) + 10 * (600 + trail)
    assert m.state_rows(-H, 30 * MIN, 600, 7200, cad) == {"join": window_rows, "dedupe": ids}
    assert m.bytes(-H, 30 * MIN, 600, 7200, cad) == window_rows * 100 + ids * 30
    assert m.bytes(-2 * H, 30 * MIN, 600, 7200, cad) == m.bytes(-H, 30 * MIN, 600, 7200, cad) + 10 * H * 100


def test_bytes_per_row_are_measured_where_the_state_held_the_most_rows():
    from jobs.accuracy.state_model import _measured_bytes_per_row

    def batch(rows, mem, dedup_rows=0):
        return {
            "stateOperators": [
                {"operatorName": "symmetricHashJoin", "numRowsTotal": rows, "memoryUsedBytes": mem},
                {"operatorName": "dedupeWithinWatermark", "numRowsTotal": dedup_rows, "memoryUsedBytes": 10**9},
            ]
        }

    # 20 batches filling the state at 200 B a row over a fixed 1 MB, then a quiet tail of 30 batches
    # holding a few hundred rows in the same memory: the tail's ~5 KB a row is the fixed part
    filling = [batch(10_000 * i, 10**6 + 200 * 10_000 * i, dedup_rows=5) for i in range(1, 21)]
    tail = [batch(200 + i, 10**6 + 200 * 200) for i in range(30)]
    bpr = _measured_bytes_per_row([*filling, *tail, {}])
    # the top tenth (5 batches: 160-200 k rows): 205-206 B a row; the de-duplication never counts
    assert bpr == pytest.approx(200 + 10**6 / 180_000, rel=1e-3)
    assert _measured_bytes_per_row(tail[:3]) == pytest.approx((10**6 + 40_000) / 202)  # one batch: the top one
    assert _measured_bytes_per_row([batch(50, 10**6), {}]) is None  # too few rows to price one
    assert _measured_bytes_per_row([batch(500, 10**6, dedup_rows=1_000)], "dedupe") == 10**6  # 10**9 B / 1,000 ids


def _cands(rows):
    return pd.DataFrame(
        rows,
        columns=["lower_s", "upper_s", "left_delay_s", "right_delay_s", "match_rate", "p99_latency_s", "memory_bytes"],
    ).assign(window_rate=lambda d: d.match_rate)


def test_the_frontier_and_the_choice_within_budgets():
    df = _cands(
        [
            (-600, 600, 60, 300, 0.900, 1200, 1e6),
            (-600, 1200, 60, 600, 0.915, 2400, 2e6),
            (-3600, 1200, 60, 600, 0.915, 2400, 5e6),  # same rate and latency, more memory: not on the frontier
            (-600, 1800, 60, 1800, 0.925, 3000, 3e6),
            (-600, 1800, 600, 7200, 0.930, 9000, 9e6),
            (-600, 600, 600, 7200, 0.910, 9500, 8e6),  # dominated
            (-600, 1800, 60, 2400, 0.92502, 3300, 3e6),  # a tie with 0.925 (< 0.01 pp): lower latency wins
        ]
    )
    front = frontier.pareto(df)
    assert front.p99_latency_s.tolist() == [1200, 2400, 3000, 9000]
    assert front.memory_bytes.tolist()[1] == 2e6
    lim = frontier.Limits(latency_s=3600, memory_bytes=4e6)
    assert frontier.choose(df, lim).p99_latency_s == 3000
    assert frontier.choose(df, frontier.Limits(latency_s=3600, memory_bytes=2.5e6)).match_rate == 0.915
    assert frontier.choose(df, frontier.Limits(latency_s=600)) is None
    assert frontier.choose(df, frontier.Limits()).match_rate == 0.930


def test_when_nothing_fits_it_says_which_budget_to_relax_and_by_how_much():
    df = _cands([(-600, 600, 60, 300, 0.900, 1200, 1e6), (-600, 1800, 60, 1800, 0.925, 6000, 3e6)])
    lim = frontier.Limits(3600, 2 * 2**30, 0.9291 - 0.015, "within 1.5 pp of batch_1d_windowed (92.91%)")
    assert frontier.relax(df, lim) == [
        "latency 1h fits nothing within 1.5 pp of batch_1d_windowed (92.91%); 1h 40m would "
        "(predicted 92.50%, window [-10m, +30m], watermarks left 1m / right 30m)"
    ]
    mem = frontier.Limits(None, 2e6, lim.floor_rate, lim.floor_label)
    assert frontier.relax(df, mem)[0].startswith("state memory 1.91MiB fits nothing within 1.5 pp")
    assert "2.86MiB would" in frontier.relax(df, mem)[0]
    both = frontier.Limits(3600, 2e6, lim.floor_rate, lim.floor_label)
    assert frontier.relax(df, both)[0].startswith("neither budget alone fits anything")
    hopeless = frontier.Limits(3600, None, 0.99, "within 0 pp of x (99.00%)")
    assert "relaxing a budget cannot reach it" in frontier.relax(df, hopeless)[0]
    assert frontier.relax(df, frontier.Limits(7200, None, lim.floor_rate, "")) == []  # something fits


def test_a_choice_within_a_tie_of_the_floor_is_within_the_tolerance_and_needs_no_relaxing():
    """The recommendation's "within the tolerance" is the frontier's floor (a tie of it counts):
    a choice 0.003 pp under it had been called outside the tolerance with no budget to relax."""
    df = _cands([(-600, 600, 60, 300, 0.88997, 1200, 1e6)])
    lim = frontier.Limits(3600, None, 0.9000 - 0.01, "within 1 pp of batch_1d_windowed (90.00%)")
    chosen = frontier.choose(df, lim)
    assert chosen is not None and frontier.reaches_floor(chosen.match_rate, lim)
    assert frontier.relax(df, lim) == []
    under = _cands([(-600, 600, 60, 300, 0.88990, 1200, 1e6)])  # 0.01 pp under: no tie
    assert not frontier.reaches_floor(under.match_rate.iloc[0], lim)
    assert "relaxing a budget cannot reach it" in frontier.relax(under, lim)[0]


def test_the_one_verdict_on_a_measured_day_passes_a_gap_of_exactly_the_tolerance():
    from jobs.spec.shares import gap_pp, within_tolerance

    assert within_tolerance(0.935 - 0.015, 0.935, 1.5)  # -1.5 pp, float noise and all
    assert not within_tolerance(0.935 - 0.0151, 0.935, 1.5)
    assert gap_pp(0.92, 0.935) == -1.5


def test_a_paced_spec_that_fits_nothing_is_told_the_pt_percentile_that_would():
    """The paced engine's windows run again at a higher PT percentile: the best of them within the
    budgets and the floor, with its first answers; nothing when none fits there either."""
    from jobs.accuracy.paced_model import FIRST_ANSWER_RATE

    faster = _cands(
        [
            (-10800, 1800, 0, 0, 0.9320, 1898, 3e6),
            (-10800, 600, 0, 0, 0.9264, 700, 3e6),
            (-600, 600, 0, 0, 0.85, 650, 1e6),
        ]
    ).assign(**{FIRST_ANSWER_RATE: [0.9200, 0.9007, 0.84]})
    lim = frontier.Limits(3600, 2 * 2**30, 0.9293 - 0.015, "within 1.5 pp of batch_1d_windowed (92.93%)")
    assert frontier.percentile_relax(faster, lim, 95) == [
        "streaming.paced.pt_percentile 95 would fit (predicted 93.20%, first answers 92.00%, p99 latency 31m 38s, "
        "window [-3h, +30m])"
    ]
    assert frontier.percentile_relax(faster, frontier.Limits(600, None, lim.floor_rate, ""), 95) == []
    assert frontier.percentile_relax(faster, frontier.Limits(1200, None, 0.93, ""), 95) == []  # under the floor


def test_the_grid_refines_between_the_frontier_points_around_the_budget():
    df = _cands([(-600, 600, 60, 300, 0.90, 1200, 1e6), (-600, 1800, 60, 1800, 0.925, 6000, 3e6)])
    axes = {
        "lower_s": [-3600, -600, 0],
        "upper_s": [0, 600, 1800],
        "left_delay_s": [0, 60],
        "right_delay_s": [300, 1800],
    }
    grids = frontier.refinement(df, axes, frontier.Limits(latency_s=3600))
    windows = {w for ws, _ in grids for w in ws}
    delays = {d for _, ds in grids for d in ds}
    assert (-600, 1200) in windows and (-2100, 600) in windows  # midpoints of the coarse axes
    assert (60, 1080) in delays and (30, 300) in delays


def test_without_a_latency_budget_the_grid_refines_around_the_frontiers_knee():
    # match rate saturates: the knee is where more latency stops buying rate (3000 s, 92.5%)
    df = _cands(
        [
            (-600, 600, 60, 300, 0.800, 600, 1e6),
            (-600, 1200, 60, 600, 0.900, 1800, 2e6),
            (-600, 1800, 60, 1800, 0.925, 3000, 3e6),
            (-600, 3600, 600, 3600, 0.927, 6000, 6e6),
            (-600, 7200, 600, 7200, 0.928, 9000, 9e6),
        ]
    )
    assert frontier.knee(frontier.pareto(df)).p99_latency_s == 3000
    axes = {"lower_s": [-600], "upper_s": [600, 1200, 1800, 3600, 7200], "left_delay_s": [60, 600],
            "right_delay_s": [300, 600, 1800, 3600, 7200]}  # fmt: skip
    anchors = [int(a.p99_latency_s) for a in frontier.anchors(df, frontier.Limits())]
    assert anchors == [3000, 9000]  # the knee, and the choice (the best rate without budgets)
    windows = {w for ws, _ in frontier.refinement(df, axes, frontier.Limits()) for w in ws}
    assert {(-600, 1500), (-600, 2700)} <= windows  # midpoints either side of the knee's upper bound


def test_small_samples_say_what_the_quantile_rests_on():
    late = np.arange(483) * 1000.0
    # 0.1% of 483 records allows none to be late: the "quantile" is the maximum, and it says so
    assert recommend_watermark_delay(late, 0.001) == 482_000
    note = quantile_basis(483, 0.001)
    assert note is not None and "rests on 483 records" in note and "maximum lateness seen" in note
    assert "1,000 records" in note
    assert quantile_basis(5000, 0.001) is None
    assert "no records" in quantile_basis(0, 0.01)


def test_p99_is_the_empirical_upper_quantile():
    assert p99(np.arange(1, 101)) == 100.0
    assert p99(np.arange(1, 1001)) == 991.0
    assert np.isnan(p99([]))


def test_boundary_deltas_say_which_side_to_widen_or_shrink(demo_spec):
    span = demo_spec.window.span_seconds
    reasons = boundary_reasons(demo_spec, {"to_lower_p1": 0.5 * span, "to_upper_p1": 5.0})
    assert any("lower side can shrink" in r for r in reasons)
    assert any("widening the upper side" in r for r in reasons)


def test_verify_runs_its_own_pipeline_and_compares_per_ds(demo_spec):
    trial = verify_spec(demo_spec, -600, 1200, 60, 1800)
    assert trial.pipeline == f"{demo_spec.pipeline}__verify"
    assert trial.window.label() == "[-10m, +20m]"
    assert (trial.left.watermark_delay, trial.right.watermark_delay) == (timedelta(minutes=1), timedelta(minutes=30))
    assert trial.left.topic == demo_spec.left.topic  # the history to replay: the user's pipeline's
    res = compare(
        {"2026-11-19": 0.90, "2026-11-20": 0.95},
        0.925,
        {"2026-11-19": 899, "2026-11-20": 951},
        {"2026-11-19": 1000, "2026-11-20": 1000},
        3600.0,
        np.array([10.0, 20.0, 3000.0]),
        pipeline=trial.pipeline,
        cadence="replay-as-live with 30-minute slices",
    )
    assert [round(d.diff_pp, 3) for d in res.days] == [-0.1, 0.1]
    assert res.measured == pytest.approx(0.925) and res.within()
    assert res.measured_p99_latency_s == 3000.0 and res.output_rows == 3


def test_budgets_are_part_of_the_spec(demo_spec_data):
    from jobs.spec import SpecError, format_bytes, parse_bytes, parse_spec

    assert parse_bytes("512MiB") == 512 * 2**20 and parse_bytes("2GiB") == 2 * 2**30 and parse_bytes("1.5GB") == 1.5e9
    assert format_bytes(512 * 2**20) == "512MiB"
    assert format_bytes(1023.9 * 2**10) == "1024KiB"  # not "1.02e+03KiB"
    data = demo_spec_data()
    data["budgets"] = {"output_latency": "1h30m", "state_memory": "512MiB"}
    spec = parse_spec(data)
    assert spec.budgets.output_latency == timedelta(hours=1, minutes=30) and spec.budgets.state_memory == 512 * 2**20
    for bad, field in (({"state_memory": "lots"}, "budgets.state_memory"), ({"output_latency": "0"}, "output_latency")):
        data["budgets"] = bad
        with pytest.raises(SpecError, match=field):
            parse_spec(data)
    del data["budgets"]
    assert parse_spec(data).budgets.output_latency is None  # both optional


def test_verify_compares_like_with_like_and_clears_only_trial_pipelines(demo_spec, tmp_path):
    from types import SimpleNamespace

    from jobs.accuracy.verify import clear_trial, verify
    from jobs.settings import Settings

    rec = SimpleNamespace(cadence="live, 1-minute trigger")
    ran = []
    with pytest.raises(ValueError, match="predicted for live, 1-minute trigger"):
        verify(None, demo_spec, rec, [], bootstrap="x", slice_minutes=30, run=lambda *a, **k: ran.append(a))
    assert not ran  # nothing replayed for a prediction of another cadence
    with pytest.raises(ValueError, match="not a trial pipeline"):
        clear_trial(demo_spec)
    s = Settings(storage_root=str(tmp_path))
    trial = verify_spec(demo_spec, -600, 600, 0, 0)
    old = tmp_path / "tables" / trial.pipeline / "x"
    old.mkdir(parents=True)
    clear_trial(trial, s)
    assert not old.exists()


def test_a_paced_spec_is_told_first_what_its_prediction_runs(demo_spec):
    from jobs.accuracy.paced_model import engine_note
    from jobs.spec import Corrections, Engine

    assert engine_note(demo_spec) == []
    paced = demo_spec.model_copy(update={"streaming": demo_spec.streaming.model_copy(update={"engine": Engine.paced})})
    [note] = engine_note(paced)
    assert "paced engine" in note and "no watermark delays" in note and "first answer" in note
    amended = paced.model_copy(update={"corrections": Corrections.model_validate({"horizon": "12h"})})
    [note] = engine_note(amended)
    assert "late corrections within 12h merged in" in note


def test_a_size_reads_back_to_the_same_bytes_and_health_takes_the_same_grammar(demo_spec_data):
    """A spec written back (a checkpoint's recorded spec, ``write_spec``) spells each size exactly:
    ``1.5GB`` was written "1.4GiB" and read back 0.2 % larger, a change `plan` would list."""
    from jobs.spec import parse_spec
    from jobs.spec.size import exact_bytes

    assert [exact_bytes(n) for n in (512 * 2**20, 1_500_000_000, 10**9, 2**30 + 1, 0)] == [
        "512MiB",
        "1500MB",
        "1GB",
        "1073741825B",
        "0B",
    ]
    data = demo_spec_data()
    data["budgets"] = {"state_memory": "1.5GB"}
    data["health"] = {"max_state_bytes": "2GiB"}
    spec = parse_spec(data)
    assert spec.health.max_state_bytes == 2 * 2**30
    again = parse_spec(spec.model_dump(mode="json", by_alias=True))
    assert again == spec and again.budgets.state_memory == 1_500_000_000
    assert parse_spec(demo_spec_data()).health.max_state_bytes == 10**9  # the default, and a plain number reads
