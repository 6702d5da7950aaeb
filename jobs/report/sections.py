"""The report's sections: the input dict in, plain preformatted values for the template out.

Each builder reads one section of the report data (see :mod:`jobs.report.model`) defensively:
a missing part gives None or an empty list, a malformed one raises and the renderer marks that
section "Not available" with the reason.
"""

from __future__ import annotations

from typing import Any

from jobs.accuracy.recommend import bound_advice
from jobs.report.format import (
    ACCOUNT_TERMS,
    CAUSES,
    DASH,
    GAIN_CAUSES,
    OTHER_PARTS,
    SIDE_COLORS,
    VARIANT_COLORS,
    VARIANT_LABELS,
    VARIANTS,
    WATERFALL_COLORS,
    fmt_bytes,
    fmt_duration,
    fmt_int,
    fmt_pct,
    fmt_spec_duration,
    fmt_window,
    num,
    parse_window,
    pp_between,
    within_tolerance,
)


def rows_of(v: Any) -> list[dict]:
    return [r for r in v if isinstance(r, dict)] if isinstance(v, list) else []


def dict_of(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def rate_of(row: dict) -> float | None:
    r = num(row.get("match_rate"))
    if r is None:
        left, matched = num(row.get("left_events")), num(row.get("matched_left"))
        if left and matched is not None:
            r = matched / left
    return r


def match_rate_table(data: dict) -> dict | None:
    """{ds: {variant: row}} plus per-variant averages; None when there are no rows."""
    by_ds: dict[str, dict[str, dict]] = {}
    for r in rows_of(data.get("match_rates")):
        if r.get("ds") is None or r.get("variant") is None:
            continue
        by_ds.setdefault(str(r["ds"]), {})[str(r["variant"])] = {**r, "match_rate": rate_of(r)}
    if not by_ds:
        return None
    present = {v for rows in by_ds.values() for v in rows}
    variants = [v for v in VARIANTS if v in present] + sorted(present - set(VARIANTS))
    avg: dict[str, float | None] = {}
    for v in variants:  # over the days: matched left events ÷ left events (as recommend pools them)
        rows_v = [rows[v] for rows in by_ds.values() if v in rows and rows[v]["match_rate"] is not None]
        counts = [(num(r.get("matched_left")), num(r.get("left_events"))) for r in rows_v]
        if rows_v and all(m is not None and n for m, n in counts):
            avg[v] = sum(m or 0 for m, _ in counts) / sum(n or 0 for _, n in counts)
        else:  # rows without their counts: the days' rates, each day alike
            avg[v] = sum(r["match_rate"] for r in rows_v) / len(rows_v) if rows_v else None
    return {"by_ds": dict(sorted(by_ds.items())), "variants": variants, "avg": avg}


def hourly_table(data: dict) -> dict | None:
    """The report ds's match rate per hour: {hours, variants, by_hour: {hour: {variant: rate}},
    left_events: {hour: n}}; None when there are no rows."""
    by_hour: dict[int, dict[str, float | None]] = {}
    left: dict[int, Any] = {}
    for r in rows_of(data.get("match_rates_hourly")):
        if r.get("hour") is None or r.get("variant") is None:
            continue
        h = int(r["hour"])
        by_hour.setdefault(h, {})[str(r["variant"])] = rate_of(r)
        left.setdefault(h, r.get("left_events"))
    if not by_hour:
        return None
    present = {v for rows in by_hour.values() for v in rows}
    variants = [v for v in VARIANTS if v in present] + sorted(present - set(VARIANTS))
    return {
        "hours": sorted(by_hour),
        "variants": variants,
        "by_hour": dict(sorted(by_hour.items())),
        "left_events": left,
    }


def headline(data: dict, mr: dict | None, gates: list[dict], rec_sentence: str | None) -> dict:
    spec = dict_of(data.get("spec"))
    baseline = str(spec.get("baseline") or "batch_1d_windowed")
    tol = num(spec.get("tolerance_pp"))
    ds = str(data["ds"])
    h: dict[str, Any] = {
        "baseline": baseline,
        "baseline_label": VARIANT_LABELS.get(baseline, baseline),
        "tolerance_pp": tol,
        "ds_used": None,
        "stream": None,
        "base": None,
        "diff_pp": None,
        "within": None,
        "left_events": None,
        "matched_left": None,
    }
    if mr:
        ds_used = ds if ds in mr["by_ds"] else max(mr["by_ds"])
        rows = mr["by_ds"][ds_used]
        h["ds_used"] = ds_used
        s, b = rows.get("stream", {}), rows.get(baseline, {})
        h["stream"], h["base"] = s.get("match_rate"), b.get("match_rate")
        h["left_events"], h["matched_left"] = s.get("left_events"), s.get("matched_left")
        h["diff_pp"] = pp_between(h["stream"], h["base"])
        h["stream_avg"], h["base_avg"] = mr["avg"].get("stream"), mr["avg"].get(baseline)
        h["days"] = len(mr["by_ds"])
        if h["diff_pp"] is not None and tol is not None:
            h["within"] = within_tolerance(h["stream"], h["base"], tol)
    failed = [g for g in gates if g.get("success") is False]
    h["gates_failed"] = failed
    if h["within"] is False or failed:
        status = "attention"
    elif h["stream"] is None:
        status = "unknown"
    else:
        status = "ok"
    h["status"] = status
    d = h["diff_pp"]
    if d is None:
        h["verdict"] = "No stream vs baseline match rate for this day yet."
    else:
        side = "below" if d < 0 else "above"
        amount = f"{abs(d):.2f} pp {side}" if round(d, 2) else "level with"
        text = f"The stream's match rate is {amount} {h['baseline_label']}"
        if tol is not None:
            text += f", within the {tol:.2f} pp tolerance." if h["within"] else f", outside the {tol:.2f} pp tolerance."
        else:
            text += "."
        h["verdict"] = text
    if failed:
        h["verdict"] += f" {len(failed)} of {len(gates)} data quality gate{'s' if len(gates) != 1 else ''} failed."
    h["recommendation"] = rec_sentence
    return h


def deltas_model(bd: dict) -> list[dict]:
    out = []
    for v in [v for v in VARIANTS if v in bd] + sorted(set(bd) - set(VARIANTS)):
        d = bd[v]
        if not isinstance(d, dict):
            continue
        row = {"variant": v, "label": VARIANT_LABELS.get(v, v), "color": VARIANT_COLORS.get(v, "#334155")}
        for side in ("lower", "upper"):
            for p in ("p1", "p50", "p99"):
                row[f"{side}_{p}"] = fmt_duration(d.get(f"to_{side}_{p}"))
        out.append(row)
    return out


def delta_hints(bd: dict, spec: dict) -> list[str]:
    """§6.5: matches that crowd a bound say "widen it"; a bound never approached says "shrink it"."""
    d = bd.get("stream") if isinstance(bd.get("stream"), dict) else None
    win = parse_window(spec.get("window"))
    if not d or not win:
        return []
    span = win[1] - win[0]
    hints = []
    for side, name in (("lower", "lower"), ("upper", "upper")):
        p1 = num(d.get(f"to_{side}_p1"))
        if p1 is None or span <= 0:
            continue
        advice = bound_advice(p1, span)
        if advice == "widen":
            hints.append(
                f"1% of the stream's matches are within {fmt_duration(p1)} of the {name} bound: "
                f"matches crowd it, widening the {name} side would likely add matches."
            )
        elif advice == "shrink":
            hints.append(
                f"No more than 1% of the stream's matches come closer than {fmt_duration(p1)} "
                f"to the {name} bound: that side can shrink, saving memory"
                + (" and latency." if side == "upper" else ".")
            )
    return hints


def pt_model(pt: dict, advice: dict, spec: dict) -> list[dict]:
    out = []
    for side in ("left", "right"):
        rows = rows_of(pt.get(side)) if isinstance(pt, dict) else []
        adv = dict_of(advice.get(side)) if isinstance(advice, dict) else {}
        if not rows and not adv:
            continue
        delays = sorted(x for x in (num(r.get("pt_delay_ms")) for r in rows) if x is not None)
        wins = [x for x in (num(r.get("window_batches")) for r in rows) if x is not None]
        accs = sorted(x for x in (num(r.get("accuracy")) for r in rows) if x is not None)

        def q(vals: list[float], p: float) -> float | None:
            return vals[min(len(vals) - 1, int(p * len(vals)))] if vals else None

        delay_p50 = q(delays, 0.5)

        out.append(
            {
                "side": side,
                "color": SIDE_COLORS[side],
                "delay_min": fmt_duration(delays[0] / 1000 if delays else None),
                "delay_p50": fmt_duration(delay_p50 / 1000 if delay_p50 is not None else None),
                "delay_max": fmt_duration(delays[-1] / 1000 if delays else None),
                "windows_max": fmt_int(max(wins) if wins else None),
                "accuracy_p50": fmt_pct(q(accs, 0.5)),
                "accuracy_min": fmt_pct(accs[0] if accs else None),
                "deployed_wm": fmt_spec_duration(spec.get(f"{side}_watermark")),
                "recommended_wm": fmt_duration(adv.get("recommended_delay_s")),
                "share_behind": fmt_pct(adv.get("share_behind_pt"), 3),
            }
        )
    return out


def account_steps(acc: dict) -> list[dict] | None:
    """The waterfall of an account, in percent of the ds's left events: the baseline's rate,
    each term as a step from where the previous one ended, the stream's rate. Steps are built
    from the integer counts, so the last term ends exactly at the stream's rate. None without
    the counts the steps need."""
    n, base, stream = (num(acc.get(k)) for k in ("left_events", "baseline_matched", "stream_matched"))
    if not n or base is None or stream is None:
        return None
    baseline = str(acc.get("baseline") or "baseline")

    def pct(count: float) -> float:
        return 100 * count / n

    steps = [
        {
            "key": "baseline",
            "label": VARIANT_LABELS.get(baseline, baseline),
            "kind": "total",
            "color": VARIANT_COLORS.get(baseline, "#64748b"),
            "start": 0.0,
            "end": pct(base),
            "count": int(base),
        }
    ]
    level = base
    for term, sign in (("cutoff_gain", 1), ("left_late", -1), ("right_late", -1), ("other", -1)):
        delta = sign * (num(acc.get(term)) or 0)
        kind = "gain" if delta >= 0 else "loss"
        steps.append(
            {
                "key": term,
                "label": ACCOUNT_TERMS[term][0],
                "kind": kind,
                "color": WATERFALL_COLORS[kind],
                "start": pct(level),
                "end": pct(level + delta),
                "count": int(delta),
            }
        )
        level += delta
    steps.append(
        {
            "key": "stream",
            "label": VARIANT_LABELS["stream"],
            "kind": "total",
            "color": VARIANT_COLORS["stream"],
            "start": 0.0,
            "end": pct(stream),
            "count": int(stream),
        }
    )
    if level != stream:  # a report whose terms do not add up must not be drawn as if they did
        raise ValueError(f"the account's terms do not add up: {int(level - base):+d} vs {int(stream - base):+d}")
    return steps


def account_model(acc: dict) -> dict | None:
    """The account's table: each term with its count and pp (they sum to the difference), the
    parts of ``other``, and sample left ids of the gains."""
    steps = account_steps(acc)
    if steps is None:
        return None
    n = num(acc["left_events"]) or 0
    samples = dict_of(acc.get("samples"))

    def pp(count: float) -> str:
        return f"{100 * count / n:+.3f}"

    terms = [
        {
            "label": s["label"],
            "color": s["color"],
            "why": ACCOUNT_TERMS[s["key"]][1],
            "count": f"{s['count']:+,}",
            "pp": pp(s["count"]),
            "samples": [str(x) for x in (samples.get(s["key"]) or [])][:5],
        }
        for s in steps[1:-1]
    ]
    parts = []
    for part, (sign, why) in OTHER_PARTS.items():
        v = -sign * int(num(acc.get(part)) or 0)  # its contribution to stream − baseline
        ids = [str(x) for x in (samples.get(part) or [])][:5]
        parts.append({"label": part.replace("_", " "), "why": why, "count": f"{v:+,}", "pp": pp(v), "samples": ids})
    base, stream = steps[0], steps[-1]
    diff = stream["count"] - base["count"]
    return {
        "steps": steps,
        "terms": terms,
        "parts": parts,
        "baseline": base["label"],
        "baseline_rate": f"{base['end']:.3f}%",
        "baseline_count": f"{base['count']:,}",
        "stream_rate": f"{stream['end']:.3f}%",
        "stream_count": f"{stream['count']:,}",
        "difference": f"{diff:+,}",
        "difference_pp": pp(diff),
        "left_events": fmt_int(n),
    }


def attribution_model(att: dict) -> dict:
    counts = {k: v for k, v in dict_of(att.get("counts")).items() if k not in GAIN_CAUSES}
    samples = {k: v for k, v in dict_of(att.get("samples")).items() if k not in GAIN_CAUSES}
    causes = [c for c in CAUSES if c in counts or c in samples] + sorted((set(counts) | set(samples)) - set(CAUSES))
    misses = sum(num(counts.get(c)) or 0 for c in causes if c not in GAIN_CAUSES)
    rows = []
    for c in causes:
        label, color, why = CAUSES.get(c, (c.replace("_", " "), "#334155", ""))
        n = num(counts.get(c))
        gain = c in GAIN_CAUSES
        ids = [str(x) for x in (samples.get(c) or [])][:5]
        rows.append(
            {
                "cause": c,
                "label": label,
                "color": color,
                "why": why,
                "count": fmt_int(n),
                "share": DASH if gain or not misses or n is None else fmt_pct(n / misses, 1),
                "gain": gain,
                "samples": ids,
            }
        )
    return {"rows": rows, "misses": fmt_int(misses)}


def quarantine_model(q: dict) -> dict | None:
    sides = [s for s in ("left", "right") if isinstance(q.get(s), dict)]
    sides += sorted(s for s in q if s not in sides and isinstance(q.get(s), dict))
    reasons = sorted({r for s in sides for r in q[s]})
    if not reasons:
        return None
    rows = []
    for r in reasons:
        vals = [num(q[s].get(r)) for s in sides]
        rows.append(
            {
                "reason": r.replace("_", " "),
                "values": [fmt_int(v) if v is not None else DASH for v in vals],
                "total": fmt_int(sum(v or 0 for v in vals)),
            }
        )
    totals = [fmt_int(sum(num(q[s].get(r)) or 0 for r in reasons)) for s in sides]
    return {
        "sides": sides,
        "rows": rows,
        "totals": totals,
        "total": fmt_int(sum(num(q[s].get(r)) or 0 for s in sides for r in reasons)),
    }


def sweep_rows(sweep: list[dict], deployed: tuple | None, recommended: tuple | None) -> list[dict]:
    out = []
    for r in sorted(sweep, key=lambda r: (num(r.get("upper_s")) or 0, -(num(r.get("lower_s")) or 0))):
        lo, hi = num(r.get("lower_s")), num(r.get("upper_s"))
        key = (lo, hi)
        out.append(
            {
                "window": fmt_window(lo, hi),
                "match_rate": fmt_pct(r.get("match_rate")),
                "memory": fmt_bytes(r.get("predicted_memory_bytes")),
                "latency": fmt_duration(r.get("output_latency_s")),
                "recovery": fmt_duration(r.get("recovery_s")),
                "deployed": deployed is not None and key == tuple(deployed),
                "recommended": recommended is not None and key == tuple(recommended),
            }
        )
    return out


def windows_of(data: dict) -> tuple[tuple | None, tuple | None]:
    """(deployed, recommended) windows as (lower_s, upper_s)."""
    spec = dict_of(data.get("spec"))
    rec = dict_of(data.get("recommendation"))
    dep = dict_of(rec.get("deployed"))
    deployed = parse_window(dep.get("window")) or parse_window(spec.get("window"))
    recommended = None
    if num(rec.get("lower_s")) is not None and num(rec.get("upper_s")) is not None:
        recommended = (float(rec["lower_s"]), float(rec["upper_s"]))
    else:
        recommended = parse_window(rec.get("window"))
    return deployed, recommended


def spec_items(spec: dict) -> list[tuple[str, str]]:
    items = []
    if spec.get("window"):
        items.append(("window", str(spec["window"])))
    wm = [
        f"{s} {fmt_spec_duration(spec.get(f'{s}_watermark'))}"
        for s in ("left", "right")
        if spec.get(f"{s}_watermark") not in (None, "")
    ]
    if wm:
        items.append(("watermarks", " · ".join(wm)))
    if spec.get("join_type"):
        items.append(
            (
                "join",
                str(spec["join_type"]).replace("_", " ")
                + (f", {spec['cardinality']}" if spec.get("cardinality") else ""),
            )
        )
    if spec.get("baseline"):
        items.append(("baseline", VARIANT_LABELS.get(spec["baseline"], str(spec["baseline"]))))
    if num(spec.get("tolerance_pp")) is not None:
        items.append(("tolerance", f"{float(spec['tolerance_pp']):.2f} pp"))
    return items
