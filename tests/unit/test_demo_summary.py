"""The demo's closing lines: the recommendation, from its saved JSON, for either engine; the quality
gates' verdict and the exit code it sets."""

from __future__ import annotations

from datetime import date

from jobs.local.demo import gate_verdict, recommendation_line

REC = {
    "window": "[-3h, +30m]",
    "deployed_window": "[-3h, +30m]",
    "baseline": "batch_1d_windowed",
    "baseline_match_rate": 0.9293,
    "left_watermark_s": 600,
    "right_watermark_s": 7200,
}


def test_the_native_engines_recommendation_names_its_watermark_delays():
    rec = {**REC, "chosen": {"predicted_match_rate": 0.9317, "paced": False, "first_answer_rate": None}}
    assert recommendation_line(rec) == (
        "recommended window [-3h, +30m] (deployed [-3h, +30m]): predicted match rate 93.17% vs batch_1d_windowed "
        "92.93%, watermark delays left 10m / right 2h"
    )


def test_the_paced_engines_recommendation_names_its_first_answers_not_watermarks():
    rec = {
        **REC,
        "left_watermark_s": 0,
        "right_watermark_s": 0,
        "chosen": {"predicted_match_rate": 0.9320, "paced": True, "first_answer_rate": 0.92},
    }
    assert recommendation_line(rec) == (
        "recommended window [-3h, +30m] (deployed [-3h, +30m]): predicted match rate 93.20% vs batch_1d_windowed "
        "92.93%, first answers 92.00% (the paced engine waits for PTs)"
    )


def test_a_failed_gate_is_named_per_ds_and_makes_the_demo_exit_1():
    failed = [
        (date(2026, 11, 20), "output", "output: 2 of 14 expectations failed (left_event_id unique)"),
        (date(2026, 11, 19), "landed_left", "landed_left: event_time in range failed"),
    ]
    lines, closing = gate_verdict(failed)
    assert lines == [
        "[red]quality gate failed[/red] ds=2026-11-19: landed_left: event_time in range failed",
        "[red]quality gate failed[/red] ds=2026-11-20: output: 2 of 14 expectations failed (left_event_id unique)",
    ]
    assert closing == "[red]2 quality gates failed[/red]: the demo exits 1 (the report shows why)"
    assert gate_verdict(failed[:1])[1].startswith("[red]1 quality gate failed[/red]")


def test_passing_gates_say_nothing_and_the_demo_exits_0():
    assert gate_verdict([]) == ([], None)
