"""A realistic example report for ``search_sessions``: for tests, UI work, screenshots and demos.

from jobs.report import example_data, publish_report
files = publish_report(example_data(), Path("var/reports"))
files.html          # var/reports/search_sessions/2026-11-20/report.html
"""

from __future__ import annotations

import math
from typing import Any

from jobs.report.format import CAUSES, VARIANTS, fmt_bytes, fmt_duration, fmt_pp, fmt_window
from jobs.report.model import ReportData


def example_data(ds: str = "2026-11-20", days: int = 7, seed: int = 7) -> dict:
    """A full, realistic input for ``search_sessions`` (numbers shaped like the paper's §7):
    server-side search responses (left, ordered) joined with client clicks (right, disordered),
    window ``[-3h, +30m]``; deterministic for a given ``seed``. A dict of
    :class:`jobs.report.model.ReportData` (validated)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    end = pd.Timestamp(ds)
    dss = [(end - pd.Timedelta(days=i)).strftime("%Y-%m-%d") for i in range(days - 1, -1, -1)]

    # Fig 8: 1d->2d > 1d->1d > windowed ≈ stream (paper: 94.07 / 93.23 / 92.49 / 92.44)
    match_rates = []
    for d in dss:
        n = int(rng.integers(19000, 23000))
        base = 0.9323 + rng.normal(0, 0.0025)
        rates = {
            "batch_1d_1d": base,
            "batch_1d_2d": base + 0.0084 + rng.normal(0, 0.0006),
            "batch_1d_windowed": base - 0.0074 + rng.normal(0, 0.0008),
        }
        rates["stream"] = rates["batch_1d_windowed"] - 0.0005 + rng.normal(0, 0.0012)
        # no midnight cut-off: above the windowed baseline by what crosses midnight
        rates["reference"] = max(rates["stream"], rates["batch_1d_windowed"]) + 0.0031
        for v in VARIANTS:
            matched = int(round(n * rates[v]))
            match_rates.append(
                {"ds": d, "variant": v, "left_events": n, "matched_left": matched, "match_rate": round(matched / n, 6)}
            )

    # miss causes by hour (late clicks at night), and the account of today against the windowed
    # baseline: the stream gains what arrives after midnight and loses the late; today's stream
    # rate is the baseline's plus the terms, so the example adds up like a real report
    rng_h = np.random.default_rng(seed + 1)
    by_hour, cutoff_gain = [], 0
    for h in range(24):
        night = math.exp(-((h - 4) ** 2) / 6)
        by_hour.append(
            {
                "hour": h,
                "late_right": int(rng_h.poisson(1 + 5 * night)),
                "outside_window": int(rng_h.poisson(0.4)),
                "left_late": int(rng_h.poisson(0.1)),
            }
        )
        cutoff_gain += int(rng_h.poisson(18 if h == 23 else (9 if h == 22 else 0.1)))
    base_row = next(r for r in match_rates if r["ds"] == ds and r["variant"] == "batch_1d_windowed")
    losses = {k: sum(r[c] for r in by_hour) for k, c in (("left_late", "left_late"), ("right_late", "late_right"))}
    outside = sum(r["outside_window"] for r in by_hour)
    stream_matched = base_row["matched_left"] + cutoff_gain - sum(losses.values()) - outside
    account = {
        "ds": ds,
        "baseline": "batch_1d_windowed",
        "left_events": base_row["left_events"],
        "stream_matched": stream_matched,
        "baseline_matched": base_row["matched_left"],
        "cutoff_gain": cutoff_gain,
        **losses,
        "other": outside,
        "outside_window": outside,
        "not_yet_processed": 0,
        "unexplained": 0,
        "other_gain": 0,
        "difference": stream_matched - base_row["matched_left"],
        "samples": {"cutoff_gain": [f"L{rng_h.integers(10**6, 10**7)}" for _ in range(min(5, cutoff_gain))]},
    }
    for r in match_rates:
        if r["ds"] == ds and r["variant"] == "stream":
            r.update(matched_left=stream_matched, match_rate=round(stream_matched / r["left_events"], 6))

    # §6.5: clicks follow responses by seconds to minutes, a few by up to the upper bound
    lower_s, upper_s = -10800, 1800

    def deltas(n: int, tail: float) -> dict:
        offs = np.concatenate(
            [
                rng.gamma(1.6, 240, int(n * (1 - tail))),
                rng.uniform(0, upper_s, int(n * tail)),
                -rng.exponential(1500, int(n * 0.02)),
            ]
        )
        offs = offs[(offs >= lower_s) & (offs <= upper_s)]
        to_lower, to_upper = offs - lower_s, upper_s - offs
        out: dict[str, Any] = {}
        for side, vals in (("lower", to_lower), ("upper", to_upper)):
            for p in (1, 50, 99):
                out[f"to_{side}_p{p}"] = round(float(np.percentile(vals, p)), 1)
            edges = np.linspace(0, upper_s - lower_s, 85)
            counts, _ = np.histogram(vals, edges)
            out[f"hist_to_{side}"] = {"edges": edges.round(1).tolist(), "counts": counts.tolist()}
        return out

    boundary = {"stream": deltas(18000, 0.05), "batch_1d_windowed": deltas(18200, 0.06)}

    # per hour of the report's ds: the windowed baseline loses the last hour before midnight
    today = {r["variant"]: r["match_rate"] for r in match_rates if r["ds"] == ds}
    hourly = []
    for h in range(24):
        n = 600 + 400 * int(8 <= h <= 22)
        dip = {"batch_1d_windowed": 0.06 * (h == 23), "stream": 0.004 * (h % 5 == 0), "reference": 0.0}
        for v, drop in dip.items():
            matched = int(round(n * (today[v] - drop)))
            hourly.append(
                {"hour": h, "variant": v, "left_events": n, "matched_left": matched, "match_rate": matched / n}
            )

    # Fig 9/10: match rate saturates with the upper bound, barely moves with the look-back;
    # anchored so that the deployed window predicts today's stream match rate
    stream_today = next(r["match_rate"] for r in match_rates if r["ds"] == ds and r["variant"] == "stream")
    base_today = next(r["match_rate"] for r in match_rates if r["ds"] == ds and r["variant"] == "batch_1d_windowed")

    def shape(lo: int, up: int) -> float:
        return -0.012 * math.exp(-up / 700) - 0.002 * math.exp(lo / 2500)

    sweep = []
    right_bytes_per_s = 120e6 / 12600  # ~120 MB for the deployed 3.5 h window
    for up in (600, 1800, 2700, 3600):
        for lo in (-3600, -7200, -10800, -14400, -21600):
            span = up - lo
            rate = stream_today + shape(lo, up) - shape(lower_s, upper_s)
            sweep.append(
                {
                    "lower_s": lo,
                    "upper_s": up,
                    "match_rate": round(rate, 5),
                    "predicted_memory_bytes": round(span * right_bytes_per_s),
                    "output_latency_s": up + 600,
                    "recovery_s": round(span / 300 + 4),
                }
            )
    target = 0.995
    ok = [w for w in sweep if w["match_rate"] >= target * base_today] or sweep
    rec = min(ok, key=lambda w: (w["upper_s"] - w["lower_s"], -w["match_rate"]))
    dep = next(w for w in sweep if (w["lower_s"], w["upper_s"]) == (lower_s, upper_s))
    wider = next(w for w in sweep if (w["lower_s"], w["upper_s"]) == (rec["lower_s"], 3600))

    # Fig 12: left (server) PT delay a few seconds; right (client) 16-31 min, bump at night
    start_ms = int(pd.Timestamp(ds, tz="UTC").value // 1_000_000)
    pt: dict[str, list] = {"left": [], "right": []}
    for i in range(288):
        t = start_ms + (i + 1) * 300_000
        hour = (i * 5) / 60
        night = math.exp(-((hour - 4) ** 2) / 6)
        pt["left"].append(
            {
                "batch_end_ms": t,
                "pt_delay_ms": int(5000 + rng.normal(400, 250)),
                "window_batches": 1,
                "accuracy": round(min(1, 0.9993 + rng.normal(0, 2e-4)), 5),
            }
        )
        pt["right"].append(
            {
                "batch_end_ms": t,
                "pt_delay_ms": int((16 + 15 * night) * 60_000 + rng.normal(0, 40_000)),
                "window_batches": int(max(2, round(8 + 65 * night + rng.normal(0, 4)))),
                "accuracy": round(min(1, 0.992 - 0.004 * night + rng.normal(0, 1.2e-3)), 5),
            }
        )

    counts = {c: sum(r.get(c, 0) for r in by_hour) for c in CAUSES}
    samples = {c: [f"L{rng.integers(10**6, 10**7)}" for _ in range(min(5, counts[c]))] for c in CAUSES}

    st = boundary["stream"]
    data = {
        "pipeline": "search_sessions",
        "ds": ds,
        "generated_at": (end + pd.Timedelta(hours=26)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spec": {
            "window": "[-3h, +30m]",
            "left_watermark": "10m",
            "right_watermark": "2h",
            "join_type": "left_outer",
            "cardinality": "1-to-n",
            "baseline": "batch_1d_windowed",
            "tolerance_pp": 1.5,
        },
        "match_rates": match_rates,
        "match_rates_hourly": hourly,
        "boundary_deltas": boundary,
        "sweep": sweep,
        "pt": pt,
        "watermark_advice": {
            "left": {"recommended_delay_s": 30, "share_behind_pt": 0.0004},
            "right": {"recommended_delay_s": 5400, "share_behind_pt": 0.0011},
        },
        "attribution": {"counts": counts, "by_hour": by_hour, "samples": samples},
        "account": account,
        "recommendation": {
            "window": fmt_window(rec["lower_s"], rec["upper_s"]),
            "lower_s": rec["lower_s"],
            "upper_s": rec["upper_s"],
            "left_watermark_s": 30,
            "right_watermark_s": 5400,
            "predicted_match_rate": rec["match_rate"],
            "baseline_match_rate": base_today,
            "target_share": target,
            "predicted_memory_bytes": rec["predicted_memory_bytes"],
            "output_latency_s": rec["output_latency_s"],
            "recovery_s": rec["recovery_s"],
            "deployed": {
                "window": "[-3h, +30m]",
                "match_rate": stream_today,
                "memory_bytes": dep["predicted_memory_bytes"],
                "output_latency_s": dep["output_latency_s"],
                "recovery_s": dep["recovery_s"],
                "left_watermark_s": 600,
                "right_watermark_s": 7200,
            },
            "cadence": "live, 1-minute trigger",
            "output_latency_budget_s": 3600,
            "state_memory_budget_bytes": 2 * 2**30,
            "fits_budgets": True,
            "within_tolerance": True,
            "tolerance_pp": 1.5,
            "reference_match_rate": stream_today + 0.004,
            "frontier": [
                {
                    "lower_s": -600,
                    "upper_s": up,
                    "left_watermark_s": 30,
                    "right_watermark_s": wm,
                    "match_rate": stream_today - drop,
                    "p99_latency_s": up + wm + 120,
                    "memory_bytes": 4e6 * (1 + (up + wm) / 3600),
                }
                for up, wm, drop in ((600, 600, 0.03), (1200, 1200, 0.015), (1800, 2400, 0.008))
            ]
            + [
                {
                    "lower_s": rec["lower_s"],
                    "upper_s": rec["upper_s"],
                    "left_watermark_s": 30,
                    "right_watermark_s": 5400,
                    "match_rate": rec["match_rate"],
                    "p99_latency_s": rec["output_latency_s"],
                    "memory_bytes": rec["predicted_memory_bytes"],
                }
            ],
            "relax": [],
            "reasons": [
                f"p1 to lower is {fmt_duration(st['to_lower_p1'])}: 99% of matches are further than that "
                f"from the lower bound, so the look-back can shrink to {fmt_duration(rec['lower_s'], signed=True)}",
                f"widening the upper bound to +1h would add only "
                f"{fmt_pp(100 * (wider['match_rate'] - rec['match_rate']))} for "
                f"{fmt_bytes(wider['predicted_memory_bytes'] - rec['predicted_memory_bytes'])} more memory",
                "a 1h 30m right watermark keeps 99.9% of late clicks (now 2h)",
            ],
        },
        "gates": [
            {
                "suite": "raw_left",
                "success": True,
                "evaluated": 12,
                "failed": 0,
                "summary": "schema, ids unique, event time within 2d of arrival",
            },
            {
                "suite": "raw_right",
                "success": True,
                "evaluated": 12,
                "failed": 0,
                "summary": "schema, ids unique, event time within 2d of arrival",
            },
            {
                "suite": "joined_output",
                "success": True,
                "evaluated": 8,
                "failed": 0,
                "summary": "every left event emitted once; matches inside the window",
            },
            {
                "suite": "match_rate",
                "success": True,
                "evaluated": 1,
                "failed": 0,
                "summary": "stream within 1.5 pp of batch 1d, windowed",
            },
        ],
        "quarantine": {
            "left": {"malformed_json": 3, "missing_id": 1},
            "right": {"malformed_json": 41, "event_time_in_future": 7, "unknown_field": 12},
        },
        "runbooks": [
            {"title": "Restart after a crash", "path": "include/runbooks/restart_after_crash.md"},
            {"title": "Change the join window", "path": "include/runbooks/change_the_window.md"},
            {"title": "Replay after an outage", "path": "include/runbooks/replay_after_outage.md"},
        ],
    }
    return ReportData.model_validate(data).to_dict()  # the example keeps to the contract
