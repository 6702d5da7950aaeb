"""The report's recommendation section: the sentence, the Pareto frontier rows and the section
model, from the recommendation's dict (see :mod:`jobs.report.model`), defensively like
:mod:`jobs.report.sections`."""

from __future__ import annotations

from typing import Any

from jobs.report.format import (
    DASH,
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    fmt_spec_duration,
    fmt_window,
    num,
    parse_window,
    pp_between,
)
from jobs.report.sections import dict_of, rows_of


def recommendation_sentence(rec: dict | None, spec: dict | None = None) -> str | None:
    """The recommendation in one sentence, e.g. "Narrow the window from [-3h, +30m] to
    [-1h, +45m]: predicted match rate 92.31% vs 92.49% for the baseline (99.8% of it; target
    99.5%), memory 114MiB → 58.2MiB." None without a recommended window."""
    if not isinstance(rec, dict):
        return None
    spec = spec if isinstance(spec, dict) else {}
    new = None
    if num(rec.get("lower_s")) is not None and num(rec.get("upper_s")) is not None:
        new = (float(rec["lower_s"]), float(rec["upper_s"]))
    elif parse_window(rec.get("window")):
        new = parse_window(rec.get("window"))
    if new is None:
        return None
    new_label = rec.get("window") or fmt_window(*new)
    deployed = dict_of(rec.get("deployed"))
    old_label = deployed.get("window") or spec.get("window")
    old = parse_window(old_label)
    if old is None:
        text = f"Use the window {new_label}"
    elif abs(old[0] - new[0]) < 1e-6 and abs(old[1] - new[1]) < 1e-6:
        text = f"Keep the window at {new_label}"
    else:
        span_old, span_new = old[1] - old[0], new[1] - new[0]
        verb = "Narrow" if span_new < span_old else ("Widen" if span_new > span_old else "Shift")
        text = f"{verb} the window from {old_label} to {new_label}"
    details = []
    pred, base = num(rec.get("predicted_match_rate")), num(rec.get("baseline_match_rate"))
    if pred is not None:
        d = f"predicted match rate {fmt_pct(pred)}"
        if base:
            d += f" vs {fmt_pct(base)} for the baseline ({fmt_pct(pred / base, 1)} of it"
            target = num(rec.get("target_share"))
            d += f"; target {fmt_pct(target, 1)})" if target is not None else ")"
        details.append(d)
    mem_new, mem_old = num(rec.get("predicted_memory_bytes")), num(deployed.get("memory_bytes"))
    if mem_new is not None:
        details.append(
            f"memory {fmt_bytes(mem_old)} → {fmt_bytes(mem_new)}"
            if mem_old is not None
            else f"memory {fmt_bytes(mem_new)}"
        )
    return text + (": " + ", ".join(details) if details else "") + "."


def is_paced(rec: dict) -> bool:
    """A recommendation for the paced engine: its candidates are windows, with no watermark delays."""
    return dict_of(rec.get("inputs")).get("engine") == "paced"


def frontier_rows(rec: dict, baseline_rate: float | None) -> list[dict]:
    """The Pareto frontier as table rows, the deployed and chosen settings marked."""
    dep = dict_of(rec.get("deployed"))
    paced = is_paced(rec)

    def key(lo: Any, hi: Any, lw: Any, rw: Any) -> tuple:
        return tuple(num(v) for v in (lo, hi, lw, rw))

    chosen = key(rec.get("lower_s"), rec.get("upper_s"), rec.get("left_watermark_s"), rec.get("right_watermark_s"))
    lo, hi = parse_window(dep.get("window")) or (None, None)
    deployed = key(lo, hi, dep.get("left_watermark_s"), dep.get("right_watermark_s"))
    ref = num(rec.get("reference_match_rate"))
    out = []
    for p in rows_of(rec.get("frontier")):
        k = key(p.get("lower_s"), p.get("upper_s"), p.get("left_watermark_s"), p.get("right_watermark_s"))
        rate = num(p.get("match_rate"))
        out.append(
            {
                "match_rate": fmt_pct(rate),
                "vs_baseline": pp_between(rate, baseline_rate),
                "vs_reference": pp_between(rate, ref),
                "latency": fmt_duration(p.get("p99_latency_s")),
                "memory": fmt_bytes(p.get("memory_bytes")),
                "window": fmt_window(p.get("lower_s"), p.get("upper_s")),
                "watermarks": DASH
                if paced
                else f"{fmt_duration(p.get('left_watermark_s'))} / {fmt_duration(p.get('right_watermark_s'))}",
                "chosen": k == chosen,
                "deployed": k == deployed,
            }
        )
    return out


def recommendation_model(rec: dict, spec: dict, advice: dict | None = None) -> dict:
    deployed = dict_of(rec.get("deployed"))
    dep_window = deployed.get("window") or spec.get("window")
    new_window = rec.get("window") or fmt_window(rec.get("lower_s"), rec.get("upper_s"))
    paced = is_paced(rec)
    chosen = dict_of(rec.get("chosen"))
    delays = [
        ("Left watermark", fmt_spec_duration(spec.get("left_watermark")), fmt_duration(rec.get("left_watermark_s"))),
        ("Right watermark", fmt_spec_duration(spec.get("right_watermark")), fmt_duration(rec.get("right_watermark_s"))),
    ]
    # the paced engine waits for PTs: no delays to change; its first answers beside the final ones
    first = [
        (
            "First answers (predicted)",
            fmt_pct(deployed.get("first_answer_rate")),
            fmt_pct(chosen.get("first_answer_rate")),
        )
    ]
    rows = [
        ("Window", dep_window or DASH, new_window),
        *(first if paced else delays),
        ("Match rate (predicted)", fmt_pct(deployed.get("match_rate")), fmt_pct(rec.get("predicted_match_rate"))),
        (
            "Memory (right window state)",
            fmt_bytes(deployed.get("memory_bytes")),
            fmt_bytes(rec.get("predicted_memory_bytes")),
        ),
        (
            "p99 output latency",
            fmt_duration(deployed.get("output_latency_s")),
            fmt_duration(rec.get("output_latency_s")),
        ),
        ("Recovery after restart", fmt_duration(deployed.get("recovery_s")), fmt_duration(rec.get("recovery_s"))),
    ]
    reasons = [str(r) for r in rec.get("reasons") or [] if r]
    base = num(rec.get("baseline_match_rate"))
    pred = num(rec.get("predicted_match_rate"))
    budgets = [
        f"p99 latency ≤ {fmt_duration(rec.get('output_latency_budget_s'))}"
        if num(rec.get("output_latency_budget_s")) is not None
        else "",
        f"state memory ≤ {fmt_bytes(rec.get('state_memory_budget_bytes'))}"
        if num(rec.get("state_memory_budget_bytes")) is not None
        else "",
    ]
    # one watermark answer: the chosen delays; the PT method (paper §5.3) is evidence beside them
    evidence = []
    for side in () if paced else ("left", "right"):
        adv = dict_of(dict_of(advice).get(side))
        if num(adv.get("recommended_delay_s")) is not None:
            evidence.append(
                f"{side}: the PT method would allow {fmt_duration(adv.get('recommended_delay_s'))} "
                f"(chosen {fmt_duration(rec.get(f'{side}_watermark_s'))}); {adv.get('basis') or ''}".rstrip("; ")
            )
    return {
        "sentence": recommendation_sentence(rec, spec),
        "rows": [{"what": w, "deployed": d, "recommended": n, "changed": d != n} for w, d, n in rows],
        "reasons": reasons,
        "relax": [str(r) for r in rec.get("relax") or [] if r],
        "baseline": fmt_pct(base),
        "reference": fmt_pct(rec.get("reference_match_rate")),
        "share": fmt_pct(pred / base, 1) if pred is not None and base else DASH,
        "target": fmt_pct(rec.get("target_share"), 1),
        "cadence": rec.get("cadence"),
        "budgets": " and ".join(b for b in budgets if b) or "none in the spec",
        "fits": rec.get("fits_budgets"),
        "frontier": frontier_rows(rec, base),
        "pt_evidence": evidence,
    }
