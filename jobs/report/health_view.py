"""Stream health for people: the rows ``joinshift health`` prints and the UI page shows, from one
:class:`jobs.operate.stream_health.StreamHealth` (the same strings in both places)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from jobs.operate.stream_health import Check, StreamHealth
from jobs.report.format import DASH, fmt_bytes, fmt_duration, fmt_int
from jobs.spec.shares import pct
from jobs.spec.size import exact_bytes

#: Row labels, in the order checks are shown.
LABELS = {
    "lag_records": "Lag (records)",
    "lag_time": "Lag (oldest unread)",
    "pt_margin": "PT ahead of watermark",
    "pt_sync": "PT sync gap (left PT + upper - right PT)",
    "state_rows": "State rows",
    "state_bytes": "State memory",
    "batch_age": "Last micro-batch age",
    "restarts_24h": "Restarts in 24 h",
    "late_drop_rate": "Late-drop rate",
}
STATUS_LABELS = {"ok": "ok", "warn": "warn", "unknown": "unknown"}


def fmt_value(v: float | None, kind: str) -> str:
    if v is None:
        return DASH
    if kind == "bytes":
        return fmt_bytes(v)
    if kind == "duration":
        return fmt_duration(v) if v >= 0 else "-" + fmt_duration(-v)
    if kind == "rate":
        return pct(v)
    return fmt_int(v)


def fmt_threshold(c: Check) -> str:
    # a size threshold as the spec writes it (1GB, 512MiB), not rounded into other units
    exact = c.kind == "bytes" and c.threshold is not None and float(c.threshold).is_integer()
    shown = exact_bytes(int(c.threshold)) if exact else fmt_value(c.threshold, c.kind)
    return ("≤ " if c.rule == "max" else "≥ ") + shown


def _age(ts: float | None, now: float) -> str:
    if ts is None:
        return DASH
    return "just now" if now - ts < 1 else f"{fmt_duration(now - ts)} ago"


def _at(ts: float | None) -> str:
    return DASH if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def health_view(h: StreamHealth, now: float | None = None) -> dict[str, Any]:
    """Plain strings for a template or a terminal: the rows (label, stream, value, threshold,
    status, note), the snapshot's time and age, where the lag came from, the watermark and PTs."""
    now = time.time() if now is None else now
    order = list(LABELS)
    checks = sorted(h.checks, key=lambda c: (order.index(c.name) if c.name in order else 99, c.stream or ""))
    rows = [
        {
            "name": c.name,
            "label": LABELS.get(c.name, c.name),
            "stream": c.stream or "",
            "value": fmt_value(c.value, c.kind),
            "threshold": fmt_threshold(c),
            "status": c.status,
            "note": c.note,
        }
        for c in checks
    ]
    source = {
        "kafka": "Kafka, now",
        "health log": f"the supervisor's health log, sampled {_age(h.lag_sampled_at, now)}",
        "none": "unknown",
    }.get(h.lag_source, h.lag_source)
    return {
        "pipeline": h.pipeline,
        "status": h.status,
        "taken_at": _at(h.taken_at),
        "age": _age(h.taken_at, now),
        "last_batch_id": DASH if h.last_batch_id is None else str(h.last_batch_id),
        "last_batch_at": _at(h.last_batch_at),
        "watermark": h.watermark or DASH,
        "pt": {x: h.pt.get(x) or DASH for x in ("left", "right")},
        "lag_source": source,
        "notes": list(h.notes),
        "rows": rows,
        "warnings": sum(1 for r in rows if r["status"] == "warn"),
    }


def render_health(h: StreamHealth, now: float | None = None) -> str:
    """The snapshot as text (``joinshift health``)."""
    v = health_view(h, now)
    lines = [
        f"stream health of {v['pipeline']}: {v['status'].upper()} "
        f"({v['warnings']} warning{'s' if v['warnings'] != 1 else ''}), taken {v['taken_at']}",
        f"  last micro-batch {v['last_batch_id']} ended {v['last_batch_at']}; watermark {v['watermark']}; "
        f"PT left {v['pt']['left']}, right {v['pt']['right']}",
        f"  lag from {v['lag_source']}",
    ]
    w = max(len(r["label"]) + len(r["stream"]) + 3 for r in v["rows"])
    for r in v["rows"]:
        label = f"{r['label']} ({r['stream']})" if r["stream"] else r["label"]
        note = f"  {r['note']}" if r["note"] else ""
        lines.append(f"  {label:<{w}} {r['value']:>12}  {r['threshold']:<12} {r['status']:<7}{note}")
    lines += [f"  note: {n}" for n in v["notes"]]
    return "\n".join(lines)
