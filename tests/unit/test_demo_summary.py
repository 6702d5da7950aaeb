"""The demo's closing line on the recommendation, from its saved JSON, for either engine."""

from __future__ import annotations

from jobs.local.demo import recommendation_line

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
