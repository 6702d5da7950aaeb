"""Recommendation logic on numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.accuracy.recommend import (
    Prediction,
    boundary_reasons,
    choose,
    lateness_behind_max,
    predict,
    watermark_delay_for,
)


def test_lateness_is_measured_behind_the_running_max_event_time_in_arrival_order():
    arrival = np.array([1, 2, 3, 4, 5]) * 1000
    event = np.array([10, 20, 15, 30, 5]) * 1000  # 15 is 5 s behind 20; 5 is 25 s behind 30
    assert (lateness_behind_max(arrival, event) / 1000).tolist() == [0, 0, 5, 0, 25]
    # input order does not matter: arrival order does
    perm = np.array([4, 2, 0, 3, 1])
    assert (lateness_behind_max(arrival[perm], event[perm]) / 1000).tolist() == [25, 5, 0, 0, 0]


def test_watermark_delay_drops_at_most_the_target_share():
    late = np.arange(1000) * 1000  # 0 .. 999 s
    d = watermark_delay_for(late, 0.01)
    assert np.mean(late > d * 1000) <= 0.01
    assert np.mean(late > (d - 1) * 1000) > 0.01  # and it is the smallest such delay
    with pytest.raises(ValueError, match="target_drop_rate"):
        watermark_delay_for(late, 1.5)


def test_predictions_follow_the_documented_formulas():
    sweep = pd.DataFrame({"lower_s": [-3600], "upper_s": [1800], "match_rate": [0.9]})
    (p,) = predict(
        sweep,
        late_loss=0.01,
        right_rate=10,
        left_rate=5,
        bytes_per_row=100,
        left_delay_s=60,
        right_delay_s=600,
        replay_rows_per_s=1000,
    )
    right_rows = 10 * (5400 + 600)
    left_rows = 5 * (1800 + 60)
    assert p.predicted_memory_bytes == (right_rows + left_rows) * 100
    assert p.predicted_match_rate == pytest.approx(0.89)
    assert p.output_latency_s == 1800 + 600
    assert p.recovery_s == pytest.approx((right_rows + left_rows) / 1000)


def _p(lo, up, rate):
    return Prediction(lo, up, rate, rate, 0.0, 0.0, None)


def test_the_smallest_window_reaching_the_target_wins():
    preds = [_p(-3600, 1800, 0.92), _p(-1800, 1800, 0.918), _p(-600, 600, 0.80), _p(-10800, 1800, 0.925)]
    assert choose(preds, baseline_rate=0.925, target_share=0.99).label() == "[-30m, +30m]"
    # nothing reaches an impossible target: the best match rate is offered instead
    assert choose(preds, baseline_rate=0.99, target_share=1.0).label() == "[-3h, +30m]"


def test_boundary_deltas_say_which_side_to_widen_or_shrink(demo_spec):
    span = demo_spec.window.span_seconds
    reasons = boundary_reasons(demo_spec, {"to_lower_p1": 0.5 * span, "to_upper_p1": 5.0})
    assert any("lower side can shrink" in r for r in reasons)
    assert any("widening the upper side" in r for r in reasons)
