"""The scheduled accuracy report: a pure renderer from one JSON-able dict to files.

:func:`render_report` turns the day's numbers (produced by compare, the window sweep, the PT
estimator, the gates and the recommendation) into a self-contained ``report.html`` (plots
embedded as base64 PNGs), the same plots as PNG files next to it, and ``report.json`` (the
input, so machines can read it). :func:`write_latest_pointer` keeps
``<reports_root>/<pipeline>/latest.json`` and an ``index.html`` of every day's report; the
layout is ``<reports_root>/<pipeline>/<ds>/report.html`` (:func:`publish_report` does both).

Terms follow the paper (Facebook, "Providing Streaming Joins as a Service", VLDB 2018): *match
rate* = matched left events / left events (§7.1); the *window* ``[lower, upper]`` is relative
to the left event time; *boundary deltas* are how far matched right events are from the
window's bounds (§6.5); *PT* is the estimated processing time of a stream and *PT delay* the
wall clock minus PT (§5.3, §7.4).

Input contract
--------------
Every key is optional except ``pipeline`` and ``ds``. A missing (or empty) section renders as
"Not available yet"; a malformed one renders as "Not available" with the error, never crashes
the report. Times are seconds unless the key says ``_ms``; rates are fractions in [0, 1]::

    {
     "pipeline": "search_sessions", "ds": "2026-11-20",        # required
     "generated_at": "2026-11-21T02:00:00Z",
     "spec": {"window": "[-3h, +30m]", "left_watermark": "10m", "right_watermark": "2h",
              "join_type": "left_outer", "cardinality": "1-to-n",
              "baseline": "batch_1d_windowed",                  # variant the stream is held to
              "tolerance_pp": 1.5},                             # allowed shortfall, pp
     "match_rates": [                                           # history, several ds (Fig 8)
        {"ds": "2026-11-19", "variant": "batch_1d_1d" | "batch_1d_2d" | "batch_1d_windowed" | "stream",
         "left_events": 20000, "matched_left": 18500, "match_rate": 0.925}, ...],
     "boundary_deltas": {                                       # §6.5, per windowed variant
        "stream": {"to_lower_p1": s, "to_lower_p50": s, "to_lower_p99": s,
                   "to_upper_p1": s, "to_upper_p50": s, "to_upper_p99": s,
                   "hist_to_lower": {"edges": [s, ...], "counts": [n, ...]},   # len(edges) = len(counts) + 1
                   "hist_to_upper": {...}},
        "batch_1d_windowed": {...same...}},
     "sweep": [{"lower_s": -10800, "upper_s": 1800, "match_rate": 0.92,            # Fig 9 / 10
                "predicted_memory_bytes": 1.2e8, "output_latency_s": 9000, "recovery_s": 40}, ...],
     "pt": {"left":  [{"batch_end_ms": epoch_ms, "pt_delay_ms": ms, "window_batches": 1,
                       "accuracy": 0.99}, ...],                                      # Fig 12
            "right": [...]},
     "watermark_advice": {"left": {"recommended_delay_s": 30, "share_behind_pt": 0.001},
                          "right": {...}},
     "attribution": {"counts": {"late_right": 120, "outside_window": 30, "left_late": 2,
                                "quarantined": 5, "midnight_gain": 40},
                     "by_hour": [{"hour": 0, "late_right": 10, ...}, ...],
                     "samples": {"late_right": ["L0001", ...]}},
     "recommendation": {"window": "[-2h, +30m]", "lower_s": s, "upper_s": s,
                        "left_watermark_s": s, "right_watermark_s": s,
                        "predicted_match_rate": 0.921, "baseline_match_rate": 0.925,
                        "target_share": 0.995,                  # of the baseline match rate
                        "predicted_memory_bytes": b, "output_latency_s": s, "recovery_s": s,
                        "deployed": {"window": "[-3h, +30m]", "match_rate": 0.922, "memory_bytes": b},
                        "reasons": ["p99 to upper is 2 min: widen upper", ...]},
     "gates": [{"suite": "raw_left", "success": true, "evaluated": 12, "failed": 0,
                "summary": "..."}, ...],
     "quarantine": {"left": {"malformed_json": 40, ...}, "right": {...}},
     "runbooks": [{"title": "Restart after crash", "path": "include/runbooks/restart_after_crash.md"}, ...]
    }

Attribution causes (any other key is shown too): ``late_right`` / ``outside_window`` /
``left_late`` / ``quarantined`` are reasons a left event went unmatched in the stream but not in
the baseline; ``midnight_gain`` counts matches the stream makes that the daily batch loses at
the partition cut-off (a gain, drawn below the axis).

Usage::

    from jobs.report.render import example_data, publish_report
    files = publish_report(example_data(), Path("var/reports"))
    files.html          # var/reports/search_sessions/2026-11-20/report.html

    python -m jobs.report --example --out /tmp/reports          # render the example
    python -m jobs.report --input day.json --out var/reports    # render one day's numbers

Pure: no Spark, no network. matplotlib is used through ``Figure`` objects (Agg), so no global
backend or pyplot state is touched.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import jinja2

log = logging.getLogger(__name__)

__all__ = [
    "ReportFiles",
    "render_report",
    "publish_report",
    "write_latest_pointer",
    "example_data",
    "fmt_pct",
    "fmt_pp",
    "fmt_duration",
    "fmt_bytes",
    "fmt_int",
    "fmt_window",
    "fmt_timestamp",
    "parse_window",
    "recommendation_sentence",
]

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "include" / "report_templates"
TEMPLATE_NAME = "report.html.j2"

#: The paper's three batch baselines (§7.1) and the streaming join, in report order
#: (the same order as ``jobs.tables.VARIANTS``; not imported to keep this module Spark-free).
VARIANTS = ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed", "stream")
VARIANT_LABELS = {
    "batch_1d_1d": "batch 1d → 1d",
    "batch_1d_2d": "batch 1d → 2d",
    "batch_1d_windowed": "batch 1d, windowed",
    "stream": "stream",
}
#: One colour per variant in every plot and table.
VARIANT_COLORS = {
    "batch_1d_1d": "#94a3b8",
    "batch_1d_2d": "#8b5cf6",
    "batch_1d_windowed": "#f59e0b",
    "stream": "#2563eb",
}
SIDE_COLORS = {"left": "#0d9488", "right": "#db2777"}
CAUSES = {  # cause -> (label, colour, explanation)
    "late_right": ("late right event", "#ef4444",
                   "the matching right event arrived after the right watermark had passed its window"),
    "outside_window": ("outside the window", "#f59e0b",
                       "a right event with the key exists, but its event time is outside the join window"),
    "left_late": ("late left event", "#8b5cf6",
                  "the left event arrived behind the left watermark and was emitted unmatched"),
    "quarantined": ("partner quarantined", "#64748b",
                    "the matching right event was set aside by the landing gates (malformed or invalid)"),
    "midnight_gain": ("gained across midnight", "#10b981",
                      "matches the stream makes that the daily batch loses at the partition cut-off"),
}
GAIN_CAUSES = ("midnight_gain",)
_EXTRA_COLORS = ("#0ea5e9", "#a16207", "#be185d", "#4d7c0f", "#7c3aed")
#: Light-to-dark sequence for the sweep's upper bounds (ordinal, unlike the variants).
UPPER_PALETTE = ("#5eead4", "#0891b2", "#1e40af", "#312e81")

#: Plot files, in report order, with the section they belong to.
PLOTS = {
    "match_rate_by_day": "match-rate",
    "match_rate_vs_window": "window-sweep",
    "memory_vs_window": "window-sweep",
    "boundary_deltas": "boundary-deltas",
    "pt_delay": "pt",
    "attribution": "attribution",
}
SECTIONS = (  # (id, title)
    ("match-rate", "Match rate per day"),
    ("recommendation", "Window recommendation"),
    ("window-sweep", "Window size: match rate, memory and recovery"),
    ("boundary-deltas", "Window boundary deltas"),
    ("pt", "Processing time (PT) and watermarks"),
    ("attribution", "Why left events went unmatched"),
    ("quality", "Data quality gates and quarantine"),
    ("runbooks", "Runbooks"),
)
NOT_AVAILABLE = "Not available yet"
DASH = "—"


# --------------------------------------------------------------------------------------------
# Number formatting (also used as Jinja filters)
# --------------------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    """A finite float, or None for None/NaN/inf/non-numbers."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt_pct(v: Any, digits: int = 2) -> str:
    """A fraction as a percentage: ``0.925 -> "92.50%"``; missing -> "—"."""
    f = _num(v)
    return DASH if f is None else f"{100 * f:.{digits}f}%"


def fmt_pp(v: Any, digits: int = 2) -> str:
    """Percentage points, signed: ``-0.05 -> "-0.05 pp"``, ``1.2 -> "+1.20 pp"``."""
    f = _num(v)
    if f is None:
        return DASH
    if round(f, digits) == 0:
        f = 0.0
    return f"{f:+.{digits}f} pp"


_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def fmt_duration(seconds: Any, signed: bool = False) -> str:
    """Seconds as at most two units, rounded: ``9000 -> "2h 30m"``, ``45 -> "45s"``,
    ``-10800 -> "-3h"``, ``0.25 -> "250ms"``; ``signed`` adds "+" to positive values."""
    f = _num(seconds)
    if f is None:
        return DASH
    sign = "-" if f < 0 else ("+" if signed and f > 0 else "")
    a = abs(f)
    if a == 0:
        return "+0s" if signed else "0s"
    if a < 1:
        return f"{sign}{round(a * 1000)}ms"
    if a < 10 and round(a, 1) != round(a):
        return f"{sign}{a:.1f}s"

    def largest(v: float) -> int:
        return next(i for i, (_, n) in enumerate(_UNITS) if v >= n)

    # round to the unit below the largest one, e.g. 2h 29m 50s -> 2h 30m
    step = _UNITS[min(largest(a) + 1, len(_UNITS) - 1)][1]
    total = int(round(a / step)) * step
    i = largest(total)  # rounding may carry into a bigger unit: 59m 59.6s -> 1h
    q, r = divmod(total, _UNITS[i][1])
    parts = [f"{q}{_UNITS[i][0]}"]
    if i + 1 < len(_UNITS) and r // _UNITS[i + 1][1]:
        parts.append(f"{r // _UNITS[i + 1][1]}{_UNITS[i + 1][0]}")
    return sign + " ".join(parts)


def fmt_bytes(v: Any) -> str:
    """Bytes in decimal units, 2-3 significant digits: ``1.2e9 -> "1.2 GB"``, ``1.2e8 -> "120 MB"``."""
    f = _num(v)
    if f is None:
        return DASH
    sign = "-" if f < 0 else ""
    f = abs(f)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if f < 999.5 or unit == "TB":
            if unit == "B":
                return f"{sign}{f:.0f} B"
            return f"{sign}{f:.1f} {unit}" if f < 9.95 else f"{sign}{f:.0f} {unit}"
        f /= 1000
    raise AssertionError("unreachable")


def fmt_int(v: Any) -> str:
    """An integer count with thousands separators: ``20000 -> "20,000"``."""
    f = _num(v)
    return DASH if f is None else f"{round(f):,}"


def fmt_window(lower_s: Any, upper_s: Any) -> str:
    """``(-10800, 1800) -> "[-3h, +30m]"``."""
    if _num(lower_s) is None or _num(upper_s) is None:
        return DASH
    return f"[{fmt_duration(lower_s, signed=True)}, {fmt_duration(upper_s, signed=True)}]"


_DUR_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


_COMPOUND = re.compile(r"(?:\s*\d+(?:\.\d+)?\s*(?:ms|s|m|h|d))+\s*")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")


def _parse_seconds(v: Any) -> float | None:
    """``"-3h" -> -10800``, ``"2h 30m"`` / ``"+2h30m" -> 9000``, numbers pass through; else None."""
    f = _num(v)
    if f is not None:
        return f
    if not isinstance(v, str) or not v.strip():
        return None
    s = v.strip()
    sign = -1 if s.startswith("-") else 1
    body = s[1:] if s[0] in "+-" else s
    if not _COMPOUND.fullmatch(body):
        return None
    return sign * sum(float(n) * _DUR_SECONDS[u] for n, u in _PART.findall(body))


def parse_window(v: Any) -> tuple[float, float] | None:
    """``"[-3h, +30m]" -> (-10800.0, 1800.0)``; None when it is not a window."""
    if not isinstance(v, str):
        return None
    parts = v.strip().strip("[]() ").split(",")
    if len(parts) != 2:
        return None
    lo, hi = _parse_seconds(parts[0]), _parse_seconds(parts[1])
    return None if lo is None or hi is None else (lo, hi)


def _fmt_spec_duration(v: Any) -> str:
    s = _parse_seconds(v)
    return fmt_duration(s) if s is not None else (DASH if v in (None, "") else str(v))


def fmt_timestamp(v: Any) -> str:
    """ISO-8601 -> "2026-11-21 02:00 UTC" (other strings pass through)."""
    if v in (None, ""):
        return DASH
    try:
        t = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        return str(v)
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M UTC")
    return t.strftime("%Y-%m-%d %H:%M")


def _pp(a: Any, b: Any) -> float | None:
    fa, fb = _num(a), _num(b)
    return None if fa is None or fb is None else 100 * (fa - fb)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`render_report` wrote. ``images`` holds only the plots that had data."""

    out_dir: Path
    html: Path
    json: Path
    images: dict[str, Path] = field(default_factory=dict)
    #: section ids rendered as "not available" (no data, or data that could not be read)
    unavailable: tuple[str, ...] = ()
    #: "ok" | "attention" | "unknown": the headline verdict
    status: str = "unknown"

    @property
    def all(self) -> list[Path]:
        return [self.html, self.json, *self.images.values()]


def _json_safe(v: Any) -> Any:
    """Strict JSON: NaN/inf -> None, dates and other objects -> str."""
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (str, int, bool)):
        return v
    if hasattr(v, "item"):  # numpy scalars
        return _json_safe(v.item())
    return str(v)


def _write_text(path: Path, text: str) -> None:
    """Write via a temp file + rename, so a reader never sees half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------------------------
# Section models: dict in, plain values for the template out
# --------------------------------------------------------------------------------------------


def _rows(v: Any) -> list[dict]:
    return [r for r in v if isinstance(r, dict)] if isinstance(v, list) else []


def _rate(row: dict) -> float | None:
    r = _num(row.get("match_rate"))
    if r is None:
        left, matched = _num(row.get("left_events")), _num(row.get("matched_left"))
        if left and matched is not None:
            r = matched / left
    return r


def _match_rate_table(data: dict) -> dict | None:
    """{ds: {variant: row}} plus per-variant averages; None when there are no rows."""
    by_ds: dict[str, dict[str, dict]] = {}
    for r in _rows(data.get("match_rates")):
        if r.get("ds") is None or r.get("variant") is None:
            continue
        by_ds.setdefault(str(r["ds"]), {})[str(r["variant"])] = {**r, "match_rate": _rate(r)}
    if not by_ds:
        return None
    present = {v for rows in by_ds.values() for v in rows}
    variants = [v for v in VARIANTS if v in present] + sorted(present - set(VARIANTS))
    avg = {}
    for v in variants:
        vals = [rows[v]["match_rate"] for rows in by_ds.values()
                if v in rows and rows[v]["match_rate"] is not None]
        avg[v] = sum(vals) / len(vals) if vals else None
    return {"by_ds": dict(sorted(by_ds.items())), "variants": variants, "avg": avg}


def _headline(data: dict, mr: dict | None, gates: list[dict], rec_sentence: str | None) -> dict:
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    baseline = str(spec.get("baseline") or "batch_1d_windowed")
    tol = _num(spec.get("tolerance_pp"))
    ds = str(data["ds"])
    h: dict[str, Any] = {"baseline": baseline, "baseline_label": VARIANT_LABELS.get(baseline, baseline),
                         "tolerance_pp": tol, "ds_used": None, "stream": None, "base": None,
                         "diff_pp": None, "within": None, "left_events": None, "matched_left": None}
    if mr:
        ds_used = ds if ds in mr["by_ds"] else max(mr["by_ds"])
        rows = mr["by_ds"][ds_used]
        h["ds_used"] = ds_used
        s, b = rows.get("stream", {}), rows.get(baseline, {})
        h["stream"], h["base"] = s.get("match_rate"), b.get("match_rate")
        h["left_events"], h["matched_left"] = s.get("left_events"), s.get("matched_left")
        h["diff_pp"] = _pp(h["stream"], h["base"])
        h["stream_avg"], h["base_avg"] = mr["avg"].get("stream"), mr["avg"].get(baseline)
        h["days"] = len(mr["by_ds"])
        if h["diff_pp"] is not None and tol is not None:
            h["within"] = h["diff_pp"] >= -tol - 1e-9
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
            text += (f", within the {tol:.2f} pp tolerance." if h["within"]
                     else f", outside the {tol:.2f} pp tolerance.")
        else:
            text += "."
        h["verdict"] = text
    if failed:
        h["verdict"] += (f" {len(failed)} of {len(gates)} data quality gate"
                         f"{'s' if len(gates) != 1 else ''} failed.")
    h["recommendation"] = rec_sentence
    return h


def recommendation_sentence(rec: dict | None, spec: dict | None = None) -> str | None:
    """The recommendation in one sentence, e.g. "Narrow the window from [-3h, +30m] to
    [-1h, +45m]: predicted match rate 92.31% vs 92.49% for the baseline (99.8% of it; target
    99.5%), memory 120 MB → 61 MB." None without a recommended window."""
    if not isinstance(rec, dict):
        return None
    spec = spec if isinstance(spec, dict) else {}
    new = None
    if _num(rec.get("lower_s")) is not None and _num(rec.get("upper_s")) is not None:
        new = (float(rec["lower_s"]), float(rec["upper_s"]))
    elif parse_window(rec.get("window")):
        new = parse_window(rec.get("window"))
    if new is None:
        return None
    new_label = rec.get("window") or fmt_window(*new)
    deployed = rec.get("deployed") if isinstance(rec.get("deployed"), dict) else {}
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
    pred, base = _num(rec.get("predicted_match_rate")), _num(rec.get("baseline_match_rate"))
    if pred is not None:
        d = f"predicted match rate {fmt_pct(pred)}"
        if base:
            d += f" vs {fmt_pct(base)} for the baseline ({fmt_pct(pred / base, 1)} of it"
            target = _num(rec.get("target_share"))
            d += f"; target {fmt_pct(target, 1)})" if target is not None else ")"
        details.append(d)
    mem_new, mem_old = _num(rec.get("predicted_memory_bytes")), _num(deployed.get("memory_bytes"))
    if mem_new is not None:
        details.append(f"memory {fmt_bytes(mem_old)} → {fmt_bytes(mem_new)}" if mem_old is not None
                       else f"memory {fmt_bytes(mem_new)}")
    return text + (": " + ", ".join(details) if details else "") + "."


def _recommendation_model(rec: dict, spec: dict) -> dict:
    deployed = rec.get("deployed") if isinstance(rec.get("deployed"), dict) else {}
    dep_window = deployed.get("window") or spec.get("window")
    new_window = rec.get("window") or fmt_window(rec.get("lower_s"), rec.get("upper_s"))
    rows = [
        ("Window", dep_window or DASH, new_window),
        ("Left watermark", _fmt_spec_duration(spec.get("left_watermark")),
         fmt_duration(rec.get("left_watermark_s"))),
        ("Right watermark", _fmt_spec_duration(spec.get("right_watermark")),
         fmt_duration(rec.get("right_watermark_s"))),
        ("Match rate", fmt_pct(deployed.get("match_rate")), fmt_pct(rec.get("predicted_match_rate"))),
        ("Memory (right window state)", fmt_bytes(deployed.get("memory_bytes")),
         fmt_bytes(rec.get("predicted_memory_bytes"))),
        ("Output latency", fmt_duration(deployed.get("output_latency_s")),
         fmt_duration(rec.get("output_latency_s"))),
        ("Recovery after restart", fmt_duration(deployed.get("recovery_s")),
         fmt_duration(rec.get("recovery_s"))),
    ]
    reasons = [str(r) for r in rec.get("reasons") or [] if r]
    base = _num(rec.get("baseline_match_rate"))
    pred = _num(rec.get("predicted_match_rate"))
    return {
        "sentence": recommendation_sentence(rec, spec),
        "rows": [{"what": w, "deployed": d, "recommended": n, "changed": d != n} for w, d, n in rows],
        "reasons": reasons,
        "baseline": fmt_pct(base),
        "share": fmt_pct(pred / base, 1) if pred is not None and base else DASH,
        "target": fmt_pct(rec.get("target_share"), 1),
    }


def _deltas_model(bd: dict) -> list[dict]:
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


def _delta_hints(bd: dict, spec: dict) -> list[str]:
    """§6.5: matches that crowd a bound say "widen it"; a bound never approached says "shrink it"."""
    d = bd.get("stream") if isinstance(bd.get("stream"), dict) else None
    win = parse_window(spec.get("window"))
    if not d or not win:
        return []
    span = win[1] - win[0]
    hints = []
    for side, name in (("lower", "lower"), ("upper", "upper")):
        p1 = _num(d.get(f"to_{side}_p1"))
        if p1 is None or span <= 0:
            continue
        if p1 <= 0.02 * span:
            hints.append(f"1% of the stream's matches are within {fmt_duration(p1)} of the {name} bound: "
                         f"matches crowd it, widening the {name} side would likely add matches.")
        elif p1 >= 0.25 * span:
            hints.append(f"No more than 1% of the stream's matches come closer than {fmt_duration(p1)} "
                         f"to the {name} bound: that side can shrink, saving memory"
                         + (" and latency." if side == "upper" else "."))
    return hints


def _pt_model(pt: dict, advice: dict, spec: dict) -> list[dict]:
    out = []
    for side in ("left", "right"):
        rows = _rows(pt.get(side)) if isinstance(pt, dict) else []
        adv = advice.get(side) if isinstance(advice, dict) and isinstance(advice.get(side), dict) else {}
        if not rows and not adv:
            continue
        delays = sorted(x for x in (_num(r.get("pt_delay_ms")) for r in rows) if x is not None)
        wins = [x for x in (_num(r.get("window_batches")) for r in rows) if x is not None]
        accs = sorted(x for x in (_num(r.get("accuracy")) for r in rows) if x is not None)

        def q(vals: list[float], p: float) -> float | None:
            return vals[min(len(vals) - 1, int(p * len(vals)))] if vals else None

        out.append({
            "side": side, "color": SIDE_COLORS[side],
            "delay_min": fmt_duration(delays[0] / 1000 if delays else None),
            "delay_p50": fmt_duration(q(delays, 0.5) / 1000 if delays else None),
            "delay_max": fmt_duration(delays[-1] / 1000 if delays else None),
            "windows_max": fmt_int(max(wins) if wins else None),
            "accuracy_p50": fmt_pct(q(accs, 0.5)),
            "accuracy_min": fmt_pct(accs[0] if accs else None),
            "deployed_wm": _fmt_spec_duration(spec.get(f"{side}_watermark")),
            "recommended_wm": fmt_duration(adv.get("recommended_delay_s")),
            "share_behind": fmt_pct(adv.get("share_behind_pt"), 3),
        })
    return out


def _attribution_model(att: dict) -> dict:
    counts = att.get("counts") if isinstance(att.get("counts"), dict) else {}
    samples = att.get("samples") if isinstance(att.get("samples"), dict) else {}
    causes = [c for c in CAUSES if c in counts or c in samples] + sorted(
        (set(counts) | set(samples)) - set(CAUSES))
    misses = sum(_num(counts.get(c)) or 0 for c in causes if c not in GAIN_CAUSES)
    rows = []
    for c in causes:
        label, color, why = CAUSES.get(c, (c.replace("_", " "), "#334155", ""))
        n = _num(counts.get(c))
        gain = c in GAIN_CAUSES
        ids = [str(x) for x in (samples.get(c) or [])][:5]
        rows.append({"cause": c, "label": label, "color": color, "why": why, "count": fmt_int(n),
                     "share": DASH if gain or not misses or n is None else fmt_pct(n / misses, 1),
                     "gain": gain, "samples": ids})
    return {"rows": rows, "misses": fmt_int(misses)}


def _quarantine_model(q: dict) -> dict | None:
    sides = [s for s in ("left", "right") if isinstance(q.get(s), dict)]
    sides += sorted(s for s in q if s not in sides and isinstance(q.get(s), dict))
    reasons = sorted({r for s in sides for r in q[s]})
    if not reasons:
        return None
    rows = []
    for r in reasons:
        vals = [_num(q[s].get(r)) for s in sides]
        rows.append({"reason": r.replace("_", " "), "values": [fmt_int(v) if v is not None else DASH for v in vals],
                     "total": fmt_int(sum(v or 0 for v in vals))})
    totals = [fmt_int(sum(_num(q[s].get(r)) or 0 for r in reasons)) for s in sides]
    return {"sides": sides, "rows": rows, "totals": totals,
            "total": fmt_int(sum(_num(q[s].get(r)) or 0 for s in sides for r in reasons))}


def _sweep_rows(sweep: list[dict], deployed: tuple | None, recommended: tuple | None) -> list[dict]:
    out = []
    for r in sorted(sweep, key=lambda r: (_num(r.get("upper_s")) or 0, -(_num(r.get("lower_s")) or 0))):
        lo, hi = _num(r.get("lower_s")), _num(r.get("upper_s"))
        key = (lo, hi)
        out.append({
            "window": fmt_window(lo, hi),
            "match_rate": fmt_pct(r.get("match_rate")),
            "memory": fmt_bytes(r.get("predicted_memory_bytes")),
            "latency": fmt_duration(r.get("output_latency_s")),
            "recovery": fmt_duration(r.get("recovery_s")),
            "deployed": deployed is not None and key == tuple(deployed),
            "recommended": recommended is not None and key == tuple(recommended),
        })
    return out


def _windows_of(data: dict) -> tuple[tuple | None, tuple | None]:
    """(deployed, recommended) windows as (lower_s, upper_s)."""
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    rec = data.get("recommendation") if isinstance(data.get("recommendation"), dict) else {}
    dep = rec.get("deployed") if isinstance(rec.get("deployed"), dict) else {}
    deployed = parse_window(dep.get("window")) or parse_window(spec.get("window"))
    recommended = None
    if _num(rec.get("lower_s")) is not None and _num(rec.get("upper_s")) is not None:
        recommended = (float(rec["lower_s"]), float(rec["upper_s"]))
    else:
        recommended = parse_window(rec.get("window"))
    return deployed, recommended


# --------------------------------------------------------------------------------------------
# Plots (Figure objects, Agg; no pyplot state)
# --------------------------------------------------------------------------------------------

_RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.labelcolor": "#334155",
    "axes.edgecolor": "#cbd5e1",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e2e8f0",
    "grid.linewidth": 0.8,
    "xtick.color": "#475569",
    "ytick.color": "#475569",
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "figure.dpi": 110,
    "savefig.dpi": 110,
}


def _figure(w: float, h: float, rows: int = 1, cols: int = 1, **kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def _pct_axis(ax, axis: str = "y", digits: int | None = None) -> None:
    """Fractions shown as percentages; ``digits=None`` picks the decimals from the view range."""
    from matplotlib.ticker import PercentFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0, decimals=digits))


_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 604800)


def _duration_axis(ax, axis: str = "x", signed: bool = False) -> None:
    """Ticks on whole durations (15m, 1h, 6h, ...) labelled like "2h 30m"."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    a = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    span = abs(hi - lo)
    step = next((s for s in _NICE_STEPS if span / s <= 8), _NICE_STEPS[-1])
    a.set_major_locator(MultipleLocator(step))
    a.set_major_formatter(FuncFormatter(lambda v, _: fmt_duration(v, signed=signed)))


def _mark_windows(ax, xy: Callable[[tuple], tuple | None], deployed, recommended) -> None:
    """Ring the deployed window, star the recommended one."""
    for w, kw in ((deployed, dict(marker="o", s=190, facecolors="none", edgecolors="#0f172a",
                                  linewidths=1.6, label="deployed", zorder=5)),
                  (recommended, dict(marker="*", s=230, color="#16a34a", edgecolors="white",
                                     linewidths=0.8, label="recommended", zorder=6))):
        p = xy(w) if w else None
        if p is not None:
            ax.scatter([p[0]], [p[1]], **kw)


def _plot_match_rate_by_day(mr: dict, ds: str, spec: dict):
    fig, axes = _figure(10, 3.8)
    ax = axes[0][0]
    days = list(mr["by_ds"])
    x = list(range(len(days)))
    for v in mr["variants"]:
        ys = [mr["by_ds"][d].get(v, {}).get("match_rate") for d in days]
        ys = [math.nan if y is None else y for y in ys]
        lw, ms = (2.6, 6) if v == "stream" else (1.6, 4.5)
        ax.plot(x, ys, marker="o", lw=lw, ms=ms, color=VARIANT_COLORS.get(v, "#334155"),
                label=f"{VARIANT_LABELS.get(v, v)}  (avg {fmt_pct(mr['avg'][v])})",
                zorder=4 if v == "stream" else 3)
    if ds in days:
        i = days.index(ds)
        ax.axvspan(i - 0.4, i + 0.4, color="#e0e7ff", alpha=0.6, zorder=0, lw=0)
    ax.set_xticks(x, [d[5:] if len(d) == 10 else d for d in days])
    ax.set_xlim(-0.5, len(days) - 0.5)
    ax.set_xlabel("ds (left event day)")
    ax.set_ylabel("match rate")
    _pct_axis(ax)
    ax.set_title("Match rate per day: the stream against the three daily batch joins")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def _sweep_points(sweep: list[dict]) -> list[dict]:
    pts = []
    for r in sweep:
        lo, hi = _num(r.get("lower_s")), _num(r.get("upper_s"))
        if lo is None or hi is None:
            continue
        pts.append({"lo": lo, "hi": hi, "rate": _num(r.get("match_rate")),
                    "mem": _num(r.get("predicted_memory_bytes")), "rec": _num(r.get("recovery_s")),
                    "lat": _num(r.get("output_latency_s"))})
    return pts


def _upper_colors(pts: list[dict]) -> dict[float, str]:
    """Upper bounds are ordinal: a light-to-dark sequence, away from the variant colours."""
    from matplotlib.colors import LinearSegmentedColormap, to_hex

    uppers = sorted({p["hi"] for p in pts})
    cmap = LinearSegmentedColormap.from_list("uppers", UPPER_PALETTE)
    n = max(1, len(uppers) - 1)
    return {u: to_hex(cmap(i / n if len(uppers) > 1 else 0.6)) for i, u in enumerate(uppers)}


def _plot_match_rate_vs_window(sweep: list[dict], deployed, recommended, baseline_rate, tol_pp,
                               baseline_label, target_share=None):
    pts = [p for p in _sweep_points(sweep) if p["rate"] is not None]
    if not pts:
        return None
    colors = _upper_colors(pts)
    fig, axes = _figure(10, 3.9)
    ax = axes[0][0]
    # windows far below the baseline (e.g. upper +0s) would squash the region a decision is made
    # in: the axis starts a few pp under the baseline, and those lines say where they are
    floor = baseline_rate - max(0.05, 3 * (tol_pp or 0) / 100) if baseline_rate is not None else None
    for u, c in colors.items():
        line = sorted((p for p in pts if p["hi"] == u), key=lambda p: -p["lo"])
        label = f"upper {fmt_duration(u, signed=True)}"
        if floor is not None and max(p["rate"] for p in line) < floor:
            label += f" (≤ {fmt_pct(max(p['rate'] for p in line), 1)}, below the axis)"
        ax.plot([-p["lo"] for p in line], [p["rate"] for p in line], marker="o", color=c, lw=2,
                ms=5, label=label)
    if baseline_rate is not None:
        ax.axhline(baseline_rate, color=VARIANT_COLORS["batch_1d_windowed"], lw=1.4, ls="--",
                   label=f"{baseline_label} (baseline)")
        ys = [p["rate"] for p in pts if p["rate"] >= floor] + [baseline_rate]
        if target_share:
            ax.axhline(baseline_rate * target_share, color="#16a34a", lw=1.3, ls=":",
                       label=f"target: {fmt_pct(target_share, 1)} of the baseline")
            ys.append(baseline_rate * target_share)
        pad = max(0.0005, 0.12 * (max(ys) - min(ys)))
        ax.set_ylim(min(ys) - pad, max(ys) + pad)  # the band below must not stretch the axis
        if tol_pp:
            ax.axhspan(baseline_rate - tol_pp / 100, baseline_rate, color="#fef3c7", alpha=0.45, lw=0,
                       label=f"within {tol_pp:.2f} pp of the baseline", zorder=0)
    rate_at = {(p["lo"], p["hi"]): p["rate"] for p in pts}
    _mark_windows(ax, lambda w: (-w[0], rate_at[w]) if w in rate_at else None, deployed, recommended)
    ax.set_xlabel("look-back (window lower bound)")
    ax.set_ylabel("match rate")
    _pct_axis(ax)
    xs = sorted({-p["lo"] for p in pts})
    ax.set_xticks(xs, [fmt_duration(-x, signed=True) for x in xs])
    ax.set_title("Match rate by window (one line per upper bound)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def _plot_memory_vs_window(sweep: list[dict], deployed, recommended):
    """Fig 9 plus the other two costs of §6.5: memory and recovery grow with the window size,
    output latency with the upper bound."""
    from matplotlib.ticker import FuncFormatter

    pts = _sweep_points(sweep)
    panels = [(key, title, ylab, fmt, xkey) for key, title, ylab, fmt, xkey in (
        ("mem", "Memory of the right window state", "memory", fmt_bytes, "size"),
        ("rec", "Recovery after a restart", "replay time", fmt_duration, "size"),
        ("lat", "Output latency", "latency", fmt_duration, "upper"),
    ) if any(p[key] is not None for p in pts)]
    if not panels:
        return None
    fig, axes = _figure(10, 3.3, 1, len(panels))
    xof = {"size": lambda w: w[1] - w[0], "upper": lambda w: w[1]}
    for ax, (key, title, ylab, fmt, xkey) in zip(axes[0], panels):
        at: dict[float, float] = {}
        for p in pts:
            if p[key] is not None:
                at.setdefault(xof[xkey]((p["lo"], p["hi"])), p[key])
        xs = sorted(at)
        ax.plot(xs, [at[x] for x in xs], marker="o", ms=4, lw=1.8, color=VARIANT_COLORS["stream"],
                label="candidate windows")
        vals = {(p["lo"], p["hi"]): p[key] for p in pts if p[key] is not None}
        _mark_windows(ax, lambda w: (xof[xkey](w), vals[w]) if w in vals else None, deployed, recommended)
        ax.set_title(title)
        ax.set_xlabel("window size (upper − lower)" if xkey == "size" else "window upper bound")
        ax.set_ylabel(ylab)
        ax.set_ylim(bottom=0, top=max(at.values()) * 1.12 if at else None)
        ax.set_xlim(left=0, right=max(xs) * 1.08 if xs else None)
        if xkey == "upper":
            ax.set_xticks(xs, [fmt_duration(x, signed=True) for x in xs])
        else:
            _duration_axis(ax, "x")
        if fmt is fmt_duration:
            _duration_axis(ax, "y")
        else:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, f=fmt: f(v)))
    axes[0][0].legend(loc="upper left", fontsize=8)
    return fig


def _plot_boundary_deltas(bd: dict):
    variants = [v for v in ("batch_1d_windowed", "stream") if isinstance(bd.get(v), dict)]
    variants += sorted(v for v in bd if v not in variants and isinstance(bd.get(v), dict))
    has_hist = any(isinstance(bd[v].get(f"hist_to_{s}"), dict) for v in variants for s in ("lower", "upper"))
    if not has_hist:
        return None
    fig, axes = _figure(10, 3.5, 1, 2)
    for ax, side in ((axes[0][0], "lower"), (axes[0][1], "upper")):
        for v in variants:
            hist = bd[v].get(f"hist_to_{side}")
            if not isinstance(hist, dict):
                continue
            edges = [_num(e) for e in hist.get("edges") or []]
            counts = [_num(c) or 0 for c in hist.get("counts") or []]
            if len(edges) != len(counts) + 1 or None in edges or not counts:
                continue
            total = sum(counts) or 1
            shares = [c / total for c in counts]
            color = VARIANT_COLORS.get(v, "#334155")
            if v == "stream":
                ax.stairs(shares, edges, fill=True, alpha=0.2, color=color, zorder=2)
                ax.stairs(shares, edges, lw=1.8, color=color, label=VARIANT_LABELS.get(v, v), zorder=3)
            else:
                ax.stairs(shares, edges, lw=1.5, color=color, ls=(0, (4, 2)),
                          label=VARIANT_LABELS.get(v, v), zorder=4)
            p99 = _num(bd[v].get(f"to_{side}_p99"))
            if p99 is not None:
                ax.axvline(p99, color=color, ls="--", lw=1.3, label=f"p99 {fmt_duration(p99)}")
            p1 = _num(bd[v].get(f"to_{side}_p1"))
            if p1 is not None:
                ax.axvline(p1, color=color, ls=":", lw=1.3, label=f"p1 {fmt_duration(p1)}")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        _duration_axis(ax, "x")
        _pct_axis(ax, digits=0)
        ax.set_xlabel(f"right event time − window {side} bound" if side == "lower"
                      else "window upper bound − right event time")
        ax.set_ylabel("share of matched pairs")
        ax.set_title(f"Distance of matches to the {side} bound")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right" if side == "upper" else "upper left", fontsize=7.8)
    return fig


def _plot_pt(pt: dict):
    import matplotlib.dates as mdates
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    series = {}
    for side in ("left", "right"):
        rows = _rows(pt.get(side))
        rows = [r for r in rows if _num(r.get("batch_end_ms")) is not None]
        if rows:
            rows.sort(key=lambda r: r["batch_end_ms"])
            series[side] = rows
    if not series:
        return None
    has_acc = any(_num(r.get("accuracy")) is not None for rows in series.values() for r in rows)
    n = 3 if has_acc else 2
    fig, axes = _figure(10, 2.3 * n + 0.6, n, 1, sharex=True)
    ax_d, ax_w = axes[0][0], axes[1][0]
    all_delays = []
    for side, rows in series.items():
        t = [datetime.fromtimestamp(r["batch_end_ms"] / 1000, tz=timezone.utc) for r in rows]
        d = [(_num(r.get("pt_delay_ms")) or math.nan) / 1000 for r in rows]
        all_delays += [x for x in d if x == x and x > 0]
        w = [_num(r.get("window_batches")) or math.nan for r in rows]
        c = SIDE_COLORS[side]
        ax_d.plot(t, d, color=c, lw=1.5, label=f"{side} stream")
        ax_w.step(t, w, where="post", color=c, lw=1.5, label=f"{side} stream")
        if has_acc:
            a = [(_num(r.get("accuracy")) if _num(r.get("accuracy")) is not None else math.nan) for r in rows]
            axes[2][0].plot(t, a, color=c, lw=1.2, label=f"{side} stream")
    if all_delays:
        lo, hi = min(all_delays), max(all_delays)
        if hi / max(lo, 1e-3) > 20:
            ax_d.set_yscale("log")
            nice = [0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400]
            ticks = [v for v in nice if lo / 1.5 <= v <= hi * 1.5]
            ax_d.yaxis.set_major_locator(FixedLocator(ticks))
            ax_d.yaxis.set_minor_locator(FixedLocator([]))
        else:
            ax_d.set_ylim(bottom=0)
        ax_d.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_duration(v)))
    ax_d.set_title("(a) PT delay: wall clock − estimated PT")
    ax_d.set_ylabel("PT delay")
    ax_d.legend(loc="upper right", ncols=2)
    ax_w.set_title("(b) Window of observation needed for an ascending PT sequence")
    ax_w.set_ylabel("micro-batches")
    ax_w.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
    ax_w.set_ylim(bottom=0)
    if has_acc:
        ax_a = axes[2][0]
        ax_a.set_title("(c) PT accuracy: share of the next batch's events at or after PT")
        ax_a.set_ylabel("accuracy")
        _pct_axis(ax_a)
    bottom = axes[n - 1][0]
    loc = mdates.AutoDateLocator(minticks=6, maxticks=13)
    bottom.xaxis.set_major_locator(loc)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=timezone.utc))
    bottom.set_xlabel("batch end (UTC)")
    return fig


def _plot_attribution(att: dict):
    by_hour = _rows(att.get("by_hour"))
    by_hour = [r for r in by_hour if _num(r.get("hour")) is not None]
    if not by_hour:
        return None
    causes = [c for c in CAUSES if any(c in r for r in by_hour)]
    causes += sorted({k for r in by_hour for k in r if k != "hour" and k not in CAUSES})
    hours = [int(_num(r["hour"])) for r in by_hour]
    fig, axes = _figure(10, 3.6)
    ax = axes[0][0]
    bottom = [0.0] * len(by_hour)
    extra = iter(_EXTRA_COLORS * 4)
    for c in causes:
        label, color, _ = CAUSES.get(c, (c.replace("_", " "), next(extra), ""))
        vals = [_num(r.get(c)) or 0 for r in by_hour]
        if c in GAIN_CAUSES:
            ax.bar(hours, [-v for v in vals], color=color, width=0.8, label=f"{label} (gain, below 0)")
            continue
        ax.bar(hours, vals, bottom=bottom, color=color, width=0.8, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.axhline(0, color="#475569", lw=0.8)
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{abs(v):g}"))
    ax.set_xticks(range(0, 24, 2))
    ax.set_xlim(-0.6, 23.6)
    ax.set_xlabel("hour of the left event (ds time zone)")
    ax.set_ylabel("left events")
    ax.set_title("Unmatched left events by cause and hour (stream vs baseline)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(axis="x", visible=False)
    return fig


def _save(fig, path: Path) -> str:
    """Write the PNG; return it base64-encoded for embedding."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    png = buf.getvalue()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(png)
    tmp.replace(path)
    return base64.b64encode(png).decode("ascii")


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(pct=fmt_pct, pp=fmt_pp, duration=fmt_duration, bytes=fmt_bytes,
                       int=fmt_int, timestamp=fmt_timestamp)
    return env


def _section(sections: dict, sid: str, build: Callable[[], Any]) -> Any:
    """Run one section's builder; on error, mark it unavailable with the reason (never crash)."""
    try:
        model = build()
    except Exception as e:  # a malformed section must not take the whole report down
        log.warning("report section %s could not be rendered: %s", sid, e, exc_info=True)
        sections[sid]["note"] = f"Not available: the data for this section could not be read ({type(e).__name__}: {e})."
        return None
    if model is None or model == [] or model == {}:
        return None
    sections[sid]["available"] = True
    return model


def render_report(data: dict, out_dir: Path) -> ReportFiles:
    """Render one day's report into ``out_dir`` (created): ``report.html`` (self-contained),
    the plot PNGs that have data, and ``report.json`` (the input, strict JSON).

    Raises ``ValueError`` when ``pipeline`` or ``ds`` is missing; every other key is optional.
    PNGs left from an earlier render of the same folder whose data is now missing are removed,
    so the folder always matches its ``report.json``.
    """
    if not isinstance(data, dict):
        raise ValueError("report data must be a dict")
    missing = [k for k in ("pipeline", "ds") if not data.get(k)]
    if missing:
        raise ValueError(f"report data needs {' and '.join(missing)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = _json_safe(data)
    ds = str(data["ds"])

    def part(key: str) -> Any:
        v = data.get(key)
        return v if v not in (None, [], {}) else None

    spec = data["spec"] if isinstance(data.get("spec"), dict) else {}
    gates = _rows(data.get("gates"))
    sections = {sid: {"id": sid, "title": title, "available": False, "note": None}
                for sid, title in SECTIONS}
    images: dict[str, Path] = {}
    embedded: dict[str, str] = {}

    import matplotlib

    def plot(name: str, build: Callable[[], Any]) -> None:
        try:
            with matplotlib.rc_context(_RC):
                fig = build()
                if fig is not None:
                    embedded[name] = _save(fig, out_dir / f"{name}.png")
                    images[name] = out_dir / f"{name}.png"
        except Exception as e:
            log.warning("report plot %s failed: %s", name, e, exc_info=True)

    # --- match rate (Fig 8)
    mr = _section(sections, "match-rate", lambda: _match_rate_table(data))
    if mr:
        plot("match_rate_by_day", lambda: _plot_match_rate_by_day(mr, ds, spec))

    # --- recommendation
    rec = part("recommendation")
    rec_model = _section(sections, "recommendation",
                         lambda: _recommendation_model(rec, spec) if isinstance(rec, dict) else None)
    headline = _headline(data, mr, gates, rec_model["sentence"] if rec_model else None)

    # --- sweep (Fig 9, 10)
    deployed, recommended = _windows_of(data)
    sweep = _rows(part("sweep"))
    sweep_rows = _section(sections, "window-sweep", lambda: _sweep_rows(sweep, deployed, recommended))
    if sweep_rows:
        plot("match_rate_vs_window", lambda: _plot_match_rate_vs_window(
            sweep, deployed, recommended, headline["base"], headline["tolerance_pp"],
            headline["baseline_label"],
            _num(rec.get("target_share")) if isinstance(rec, dict) else None))
        plot("memory_vs_window", lambda: _plot_memory_vs_window(sweep, deployed, recommended))

    # --- boundary deltas (§6.5)
    bd = part("boundary_deltas")
    deltas = _section(sections, "boundary-deltas",
                      lambda: {"rows": _deltas_model(bd), "hints": _delta_hints(bd, spec)}
                      if isinstance(bd, dict) and _deltas_model(bd) else None)
    if deltas:
        plot("boundary_deltas", lambda: _plot_boundary_deltas(bd))

    # --- PT (Fig 12) and watermark advice
    pt, advice = part("pt"), part("watermark_advice")
    pt_rows = _section(sections, "pt", lambda: _pt_model(pt if isinstance(pt, dict) else {},
                                                         advice if isinstance(advice, dict) else {}, spec))
    if pt_rows and isinstance(pt, dict):
        plot("pt_delay", lambda: _plot_pt(pt))

    # --- attribution
    att = part("attribution")
    att_model = _section(sections, "attribution",
                         lambda: _attribution_model(att) if isinstance(att, dict)
                         and (_attribution_model(att)["rows"] or _rows(att.get("by_hour"))) else None)
    if att_model is not None:
        plot("attribution", lambda: _plot_attribution(att))

    # --- quality
    quarantine = part("quarantine")
    q_model = _quarantine_model(quarantine) if isinstance(quarantine, dict) else None
    if gates or q_model:
        sections["quality"]["available"] = True

    # --- runbooks
    runbooks = [r for r in _rows(data.get("runbooks")) if r.get("title") or r.get("path")]
    if runbooks:
        sections["runbooks"]["available"] = True

    # stale PNGs from an earlier render of this folder
    for name in PLOTS:
        p = out_dir / f"{name}.png"
        if name not in images and p.exists():
            p.unlink()

    gen = data.get("generated_at")
    html = _env().get_template(TEMPLATE_NAME).render(
        d=data, ds=ds, pipeline=str(data["pipeline"]), generated_at=gen, spec=spec,
        spec_items=_spec_items(spec), headline=headline, sections=sections, mr=mr,
        variant_labels=VARIANT_LABELS, variant_colors=VARIANT_COLORS, rec=rec_model,
        sweep_rows=sweep_rows or [], deltas=deltas, pt_rows=pt_rows or [], att=att_model,
        gates=gates, quarantine=q_model, runbooks=runbooks, images=embedded,
        fmt_pct=fmt_pct, fmt_pp=fmt_pp, fmt_int=fmt_int, not_available=NOT_AVAILABLE,
    )
    html_path, json_path = out_dir / "report.html", out_dir / "report.json"
    _write_text(json_path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    _write_text(html_path, html)
    return ReportFiles(out_dir=out_dir, html=html_path, json=json_path, images=images,
                       unavailable=tuple(s for s, m in sections.items() if not m["available"]),
                       status=headline["status"])


def _spec_items(spec: dict) -> list[tuple[str, str]]:
    items = []
    if spec.get("window"):
        items.append(("window", str(spec["window"])))
    wm = [f"{s} {_fmt_spec_duration(spec.get(f'{s}_watermark'))}" for s in ("left", "right")
          if spec.get(f"{s}_watermark") not in (None, "")]
    if wm:
        items.append(("watermarks", " · ".join(wm)))
    if spec.get("join_type"):
        items.append(("join", str(spec["join_type"]).replace("_", " ")
                      + (f", {spec['cardinality']}" if spec.get("cardinality") else "")))
    if spec.get("baseline"):
        items.append(("baseline", VARIANT_LABELS.get(spec["baseline"], str(spec["baseline"]))))
    if _num(spec.get("tolerance_pp")) is not None:
        items.append(("tolerance", f"{float(spec['tolerance_pp']):.2f} pp"))
    return items


# --------------------------------------------------------------------------------------------
# Layout: <reports_root>/<pipeline>/<ds>/report.html, latest.json, index.html
# --------------------------------------------------------------------------------------------

_INDEX = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ pipeline }} · accuracy reports</title>
<style>
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#0f172a;background:#f8fafc;margin:0}
main{max-width:900px;margin:0 auto;padding:32px 24px}
h1{font-size:24px;margin:0 0 4px}.sub{color:#64748b;margin:0 0 20px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #e2e8f0;border-radius:8px;overflow:hidden}
th,td{padding:9px 14px;border-bottom:1px solid #eef2f7;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f1f5f9;font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#475569}
th:first-child,td:first-child{text-align:left}
a{color:#1d4ed8;text-decoration:none;font-weight:600}a:hover{text-decoration:underline}
.badge{display:inline-block;padding:2px 10px;border-radius:999px;font-size:12px;font-weight:600}
.ok{background:#dcfce7;color:#166534}.attention{background:#fee2e2;color:#991b1b}.unknown{background:#e2e8f0;color:#334155}
.latest{font-size:11px;color:#64748b;margin-left:6px}
</style></head><body><main>
<h1>{{ pipeline }}</h1><p class="sub">Daily accuracy reports, newest first. Match rate = matched left events ÷ left events.</p>
<table><thead><tr><th>ds</th><th>stream</th><th>baseline</th><th>difference</th><th>status</th></tr></thead><tbody>
{% for r in rows %}<tr><td><a href="{{ r.html }}">{{ r.ds }}</a>{% if loop.first %}<span class="latest">latest</span>{% endif %}</td>
<td>{{ r.stream }}</td><td>{{ r.base }}</td><td>{{ r.diff }}</td><td><span class="badge {{ r.status }}">{{ r.status_label }}</span></td></tr>
{% endfor %}</tbody></table></main></body></html>
""")

_STATUS_LABELS = {"ok": "ok", "attention": "needs attention", "unknown": "no data yet"}


def _index_row(pipeline_dir: Path, ds: str) -> dict:
    row = {"ds": ds, "html": f"{ds}/report.html", "stream": DASH, "base": DASH, "diff": DASH,
           "status": "unknown"}
    try:
        data = json.loads((pipeline_dir / ds / "report.json").read_text(encoding="utf-8"))
        mr = _match_rate_table(data)
        h = _headline({**data, "ds": ds}, mr, _rows(data.get("gates")), None)
        row.update(stream=fmt_pct(h["stream"]), base=fmt_pct(h["base"]), diff=fmt_pp(h["diff_pp"]),
                   status=h["status"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    row["status_label"] = _STATUS_LABELS[row["status"]]
    return row


def write_latest_pointer(reports_root: Path, pipeline: str, ds: str) -> Path:
    """Update ``<reports_root>/<pipeline>/latest.json`` and ``index.html`` after ``ds`` was rendered.

    ``latest.json`` is ``{"pipeline", "ds", "html"}`` with ``html`` relative to the pipeline
    folder (``"<ds>/report.html"``); it points at the newest ds that has a report, so
    re-rendering an older day (a backfill) does not move it back. ``index.html`` lists every
    ds folder holding a ``report.html``, newest first, with its headline numbers. Returns the
    ``latest.json`` path.
    """
    pdir = Path(reports_root) / str(pipeline)
    pdir.mkdir(parents=True, exist_ok=True)
    days = {p.parent.name for p in pdir.glob("*/report.html")}
    days.add(str(ds))
    ordered = sorted(days, reverse=True)
    newest = ordered[0]
    latest = pdir / "latest.json"
    _write_text(latest, json.dumps({"pipeline": str(pipeline), "ds": newest,
                                    "html": f"{newest}/report.html"}, indent=2) + "\n")
    rows = [_index_row(pdir, d) for d in ordered]
    _write_text(pdir / "index.html", _INDEX.render(pipeline=str(pipeline), rows=rows))
    return latest


def publish_report(data: dict, reports_root: Path) -> ReportFiles:
    """Render into ``<reports_root>/<pipeline>/<ds>/`` and update ``latest.json`` / ``index.html``."""
    if not isinstance(data, dict) or not data.get("pipeline") or not data.get("ds"):
        raise ValueError("report data needs pipeline and ds")
    files = render_report(data, Path(reports_root) / str(data["pipeline"]) / str(data["ds"]))
    write_latest_pointer(Path(reports_root), str(data["pipeline"]), str(data["ds"]))
    return files


# --------------------------------------------------------------------------------------------
# A realistic example (for tests, UI work and demos)
# --------------------------------------------------------------------------------------------


def example_data(ds: str = "2026-11-20", days: int = 7, seed: int = 7) -> dict:
    """A full, realistic input for ``search_sessions`` (numbers shaped like the paper's §7):
    server-side search responses (left, ordered) joined with client clicks (right, disordered),
    window ``[-3h, +30m]``; deterministic for a given ``seed``."""
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
        rates = {"batch_1d_1d": base, "batch_1d_2d": base + 0.0084 + rng.normal(0, 0.0006),
                 "batch_1d_windowed": base - 0.0074 + rng.normal(0, 0.0008)}
        rates["stream"] = rates["batch_1d_windowed"] - 0.0005 + rng.normal(0, 0.0012)
        for v in VARIANTS:
            matched = int(round(n * rates[v]))
            match_rates.append({"ds": d, "variant": v, "left_events": n, "matched_left": matched,
                                "match_rate": round(matched / n, 6)})

    # §6.5: clicks follow responses by seconds to minutes, a few by up to the upper bound
    lower_s, upper_s = -10800, 1800

    def deltas(n: int, tail: float) -> dict:
        offs = np.concatenate([rng.gamma(1.6, 240, int(n * (1 - tail))),
                               rng.uniform(0, upper_s, int(n * tail)),
                               -rng.exponential(1500, int(n * 0.02))])
        offs = offs[(offs >= lower_s) & (offs <= upper_s)]
        to_lower, to_upper = offs - lower_s, upper_s - offs
        out = {}
        for side, vals in (("lower", to_lower), ("upper", to_upper)):
            for p in (1, 50, 99):
                out[f"to_{side}_p{p}"] = round(float(np.percentile(vals, p)), 1)
            edges = np.linspace(0, upper_s - lower_s, 85)
            counts, _ = np.histogram(vals, edges)
            out[f"hist_to_{side}"] = {"edges": edges.round(1).tolist(), "counts": counts.tolist()}
        return out

    boundary = {"stream": deltas(18000, 0.05), "batch_1d_windowed": deltas(18200, 0.06)}

    # Fig 9/10: match rate saturates with the upper bound, barely moves with the look-back;
    # anchored so that the deployed window predicts today's stream match rate
    stream_today = next(r["match_rate"] for r in match_rates if r["ds"] == ds and r["variant"] == "stream")
    base_today = next(r["match_rate"] for r in match_rates
                      if r["ds"] == ds and r["variant"] == "batch_1d_windowed")

    def shape(lo: int, up: int) -> float:
        return -0.012 * math.exp(-up / 700) - 0.002 * math.exp(lo / 2500)

    sweep = []
    right_bytes_per_s = 120e6 / 12600  # ~120 MB for the deployed 3.5 h window
    for up in (600, 1800, 2700, 3600):
        for lo in (-3600, -7200, -10800, -14400, -21600):
            span = up - lo
            rate = stream_today + shape(lo, up) - shape(lower_s, upper_s)
            sweep.append({"lower_s": lo, "upper_s": up, "match_rate": round(rate, 5),
                          "predicted_memory_bytes": round(span * right_bytes_per_s),
                          "output_latency_s": up + 600, "recovery_s": round(span / 300 + 4)})
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
        pt["left"].append({"batch_end_ms": t, "pt_delay_ms": int(5000 + rng.normal(400, 250)),
                           "window_batches": 1, "accuracy": round(min(1, 0.9993 + rng.normal(0, 2e-4)), 5)})
        pt["right"].append({
            "batch_end_ms": t,
            "pt_delay_ms": int((16 + 15 * night) * 60_000 + rng.normal(0, 40_000)),
            "window_batches": int(max(2, round(8 + 65 * night + rng.normal(0, 4)))),
            "accuracy": round(min(1, 0.992 - 0.004 * night + rng.normal(0, 1.2e-3)), 5),
        })

    by_hour = []
    for h in range(24):
        night = math.exp(-((h - 4) ** 2) / 6)
        by_hour.append({"hour": h,
                        "late_right": int(rng.poisson(3 + 14 * night)),
                        "outside_window": int(rng.poisson(1.3)),
                        "left_late": int(rng.poisson(0.1)),
                        "quarantined": int(rng.poisson(0.25)),
                        "midnight_gain": int(rng.poisson(18 if h == 23 else (9 if h == 22 else 0.1)))})
    counts = {c: sum(r[c] for r in by_hour) for c in CAUSES}
    samples = {c: [f"L{rng.integers(10**6, 10**7)}" for _ in range(min(5, counts[c]))] for c in CAUSES}

    st = boundary["stream"]
    return {
        "pipeline": "search_sessions",
        "ds": ds,
        "generated_at": (end + pd.Timedelta(hours=26)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spec": {"window": "[-3h, +30m]", "left_watermark": "10m", "right_watermark": "2h",
                 "join_type": "left_outer", "cardinality": "1-to-n",
                 "baseline": "batch_1d_windowed", "tolerance_pp": 1.5},
        "match_rates": match_rates,
        "boundary_deltas": boundary,
        "sweep": sweep,
        "pt": pt,
        "watermark_advice": {"left": {"recommended_delay_s": 30, "share_behind_pt": 0.0004},
                             "right": {"recommended_delay_s": 5400, "share_behind_pt": 0.0011}},
        "attribution": {"counts": counts, "by_hour": by_hour, "samples": samples},
        "recommendation": {
            "window": fmt_window(rec["lower_s"], rec["upper_s"]),
            "lower_s": rec["lower_s"], "upper_s": rec["upper_s"],
            "left_watermark_s": 30, "right_watermark_s": 5400,
            "predicted_match_rate": rec["match_rate"],
            "baseline_match_rate": base_today,
            "target_share": target,
            "predicted_memory_bytes": rec["predicted_memory_bytes"],
            "output_latency_s": rec["output_latency_s"], "recovery_s": rec["recovery_s"],
            "deployed": {"window": "[-3h, +30m]", "match_rate": stream_today,
                         "memory_bytes": dep["predicted_memory_bytes"],
                         "output_latency_s": dep["output_latency_s"], "recovery_s": dep["recovery_s"]},
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
            {"suite": "raw_left", "success": True, "evaluated": 12, "failed": 0,
             "summary": "schema, ids unique, event time within 2d of arrival"},
            {"suite": "raw_right", "success": True, "evaluated": 12, "failed": 0,
             "summary": "schema, ids unique, event time within 2d of arrival"},
            {"suite": "joined_output", "success": True, "evaluated": 8, "failed": 0,
             "summary": "every left event emitted once; matches inside the window"},
            {"suite": "match_rate", "success": True, "evaluated": 1, "failed": 0,
             "summary": "stream within 1.5 pp of batch 1d, windowed"},
        ],
        "quarantine": {"left": {"malformed_json": 3, "missing_id": 1},
                       "right": {"malformed_json": 41, "event_time_in_future": 7, "unknown_field": 12}},
        "runbooks": [
            {"title": "Restart after a crash", "path": "include/runbooks/restart_after_crash.md"},
            {"title": "Change the join window", "path": "include/runbooks/change_the_window.md"},
            {"title": "Replay after an outage", "path": "include/runbooks/replay_after_outage.md"},
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.report", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="a report JSON file (the input contract)")
    src.add_argument("--example", action="store_true", help="render example_data()")
    p.add_argument("--out", required=True, help="reports root: writes <out>/<pipeline>/<ds>/")
    a = p.parse_args(argv)
    data = example_data() if a.example else json.loads(Path(a.input).read_text(encoding="utf-8"))
    files = publish_report(data, Path(a.out))
    print(files.html)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
