"""Number and label formatting for the report (also its Jinja filters), and its fixed palette.

Durations for people come from the one duration grammar: :func:`jobs.spec.duration.fmt_duration`
formats them, :func:`jobs.spec.duration.duration_seconds` reads them (``"-3h"``, ``"2h 30m"``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jobs.join.variants import VARIANTS  # the paper's baselines (§7.1), the reference, the stream: report order
from jobs.spec.duration import duration_seconds, fmt_duration
from jobs.spec.shares import DASH, num, pct, within_tolerance
from jobs.spec.size import format_bytes

__all__ = [
    "DASH",
    "VARIANTS",
    "VARIANT_LABELS",
    "VARIANT_COLORS",
    "SIDE_COLORS",
    "CAUSES",
    "GAIN_CAUSES",
    "ACCOUNT_TERMS",
    "OTHER_PARTS",
    "WATERFALL_COLORS",
    "EXTRA_COLORS",
    "UPPER_PALETTE",
    "num",
    "fmt_pct",
    "fmt_pp",
    "fmt_duration",
    "fmt_bytes",
    "fmt_int",
    "fmt_window",
    "fmt_timestamp",
    "parse_seconds",
    "parse_window",
    "fmt_spec_duration",
    "within_tolerance",
]


VARIANT_LABELS = {
    "batch_1d_1d": "batch 1d → 1d",
    "batch_1d_2d": "batch 1d → 2d",
    "batch_1d_windowed": "batch 1d, windowed",
    "reference": "reference (no cut-off)",
    "stream": "stream",
}
#: One colour per variant in every plot and table.
VARIANT_COLORS = {
    "batch_1d_1d": "#94a3b8",
    "batch_1d_2d": "#8b5cf6",
    "batch_1d_windowed": "#f59e0b",
    "reference": "#16a34a",
    "stream": "#2563eb",
}
SIDE_COLORS = {"left": "#0d9488", "right": "#db2777"}
CAUSES = {  # cause -> (label, colour, explanation)
    "late_right": (
        "late right event",
        "#ef4444",
        "the matching right event arrived after the right watermark had passed its window",
    ),
    "outside_window": (
        "outside the window",
        "#f59e0b",
        "a right event with the key exists, but its event time is outside the join window",
    ),
    "left_late": (
        "late left event",
        "#8b5cf6",
        "the left event arrived behind the left watermark and was emitted unmatched",
    ),
    "not_yet_processed": (
        "not read yet",
        "#0ea5e9",
        "the stream had not read the matching right events when the day was compared",
    ),
    "other": (
        "unexplained",
        "#64748b",
        "a match the baseline has and the stream lacks for no cause above",
    ),
}
#: Keys older reports put among the attribution counts that are gains, not miss causes: never
#: shown as causes (gains are terms of the account).
GAIN_CAUSES = ("midnight_gain",)
#: The account's terms, in waterfall order: term -> (label, explanation). Signs: the gain adds,
#: the others subtract (``other`` can be negative, then it adds).
ACCOUNT_TERMS = {
    "cutoff_gain": (
        "cut-off gain",
        "matches through right events that landed on a day the baseline does not read (its daily cut-off)",
    ),
    "left_late": (
        "left-late loss",
        "left events read after the stream had closed their window (native: behind the left watermark; "
        "paced: the right PT past the window's end)",
    ),
    "right_late": (
        "right-late loss",
        "every partner read too late (native: behind the right watermark; paced: after the window closed)",
    ),
    "other": ("other", "outside the window, not read yet or unexplained, minus gains not through the cut-off"),
}
#: Parts of ``other`` with their sign in it (+ a loss, − a gain).
OTHER_PARTS = {
    "outside_window": (1, "lost: partners outside the stream's window"),
    "not_yet_processed": (1, "lost: partners not read by the stream yet"),
    "unexplained": (1, "lost: no cause applies"),
    "other_gain": (-1, "gained: not through the cut-off"),
}
WATERFALL_COLORS = {"gain": "#10b981", "loss": "#ef4444"}
EXTRA_COLORS = ("#0ea5e9", "#a16207", "#be185d", "#4d7c0f", "#7c3aed")
#: Light-to-dark sequence for the sweep's upper bounds (ordinal, unlike the variants).
UPPER_PALETTE = ("#5eead4", "#0891b2", "#1e40af", "#312e81")


#: A fraction as a percentage (the one rule: :func:`jobs.spec.shares.pct`), by the report's name.
fmt_pct = pct


def fmt_pp(v: Any, digits: int = 2) -> str:
    """Percentage points, signed: ``-0.05 -> "-0.05 pp"``, ``1.2 -> "+1.20 pp"``."""
    f = num(v)
    if f is None:
        return DASH
    if round(f, digits) == 0:
        f = 0.0
    return f"{f:+.{digits}f} pp"


def fmt_bytes(v: Any) -> str:
    """Bytes for people, in the binary units the spec's sizes are written in (one rule:
    :func:`jobs.spec.size.format_bytes`): ``1.2e8 -> "114MiB"``; missing -> a dash."""
    f = num(v)
    return DASH if f is None else format_bytes(f)


def fmt_int(v: Any) -> str:
    """An integer count with thousands separators: ``20000 -> "20,000"``."""
    f = num(v)
    return DASH if f is None else f"{round(f):,}"


def fmt_window(lower_s: Any, upper_s: Any) -> str:
    """``(-10800, 1800) -> "[-3h, +30m]"``."""
    if num(lower_s) is None or num(upper_s) is None:
        return DASH
    return f"[{fmt_duration(lower_s, signed=True)}, {fmt_duration(upper_s, signed=True)}]"


def parse_seconds(v: Any) -> float | None:
    """``"-3h" -> -10800``, ``"2h 30m"`` / ``"+2h30m" -> 9000``, numbers pass through; else None."""
    f = num(v)
    if f is not None:
        return f
    if not isinstance(v, str) or not v.strip():
        return None
    try:
        return duration_seconds(v)
    except ValueError:
        return None


def parse_window(v: Any) -> tuple[float, float] | None:
    """``"[-3h, +30m]" -> (-10800.0, 1800.0)``; None when it is not a window."""
    if not isinstance(v, str):
        return None
    parts = v.strip().strip("[]() ").split(",")
    if len(parts) != 2:
        return None
    lo, hi = parse_seconds(parts[0]), parse_seconds(parts[1])
    return None if lo is None or hi is None else (lo, hi)


def fmt_spec_duration(v: Any) -> str:
    """A spec's duration text for people (``"2h" -> "2h"``, ``"90m" -> "1h 30m"``); unreadable as is."""
    s = parse_seconds(v)
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
        t = t.astimezone(UTC)
        return t.strftime("%Y-%m-%d %H:%M UTC")
    return t.strftime("%Y-%m-%d %H:%M")


def pp_between(a: Any, b: Any) -> float | None:
    """``100 * (a - b)``: the difference of two rates in percentage points; None if one is missing."""
    fa, fb = num(a), num(b)
    return None if fa is None or fb is None else 100 * (fa - fb)
