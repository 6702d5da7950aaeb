"""The account of a ds (:func:`jobs.accuracy.attribution.attribute_misses`) as ``joinshift attribute``
prints it, with the report's labels for its terms (:data:`jobs.report.format.ACCOUNT_TERMS`)."""

from __future__ import annotations

from typing import Any

from jobs.accuracy.attribution import CAUSES
from jobs.report.format import ACCOUNT_TERMS, OTHER_PARTS
from jobs.spec.shares import pct

_SIGNS = {"cutoff_gain": "+", "left_late": "−", "right_late": "−", "other": "−"}


def render_account(att: dict) -> Any:
    """Rich tables: the terms (they sum to the difference, in left events and in pp) and the miss
    causes with sample ids."""
    from rich.console import Group
    from rich.table import Table

    a = att["account"]
    n = a["left_events"]

    def pp(v: int) -> str:
        return f"{100 * v / n:+.3f}" if n else "—"

    def rate(v: int) -> str:
        return pct(v / n, 3) if n else "—"

    t = Table(title=f"ds {a['ds']}: stream − {a['baseline']} = the sum of the terms ({n:,} left events)")
    for h, j in (("", "left"), ("left events", "right"), ("pp", "right"), ("sample left ids", "left")):
        t.add_column(h, justify=j)  # type: ignore[arg-type]
    ids = {
        **att["samples"],
        **a["samples"],
        "right_late": att["samples"].get("late_right", []),
        "unexplained": att["samples"].get("other", []),
        "other": [],
    }

    def sample(key: str) -> str:
        return " ".join(ids.get(key, [])[:3])

    t.add_row(f"{a['baseline']} matched", f"{a['baseline_matched']:,}", rate(a["baseline_matched"]))
    signed = {
        "cutoff_gain": a["cutoff_gain"],
        "left_late": -a["left_late"],
        "right_late": -a["right_late"],
        "other": -a["other"],
    }
    for term, v in signed.items():
        label, why = ACCOUNT_TERMS[term]
        t.add_row(f"{_SIGNS[term]} {label} ({why})", f"{v:+,}", pp(v), sample(term))
    for part, (sign, what) in OTHER_PARTS.items():
        v = -sign * a[part]
        t.add_row(f"    of which {part} ({what})", f"{v:+,}", pp(v), sample(part), style="dim")
    t.add_section()
    t.add_row("= stream − baseline", f"{a['difference']:+,}", pp(a["difference"]), style="bold")
    t.add_row("stream matched", f"{a['stream_matched']:,}", rate(a["stream_matched"]))

    c = Table(title=f"why left events {a['baseline']} matched have no stream match (miss causes)")
    for h in ("cause", "left events", "sample left ids"):
        c.add_column(h)
    for cause in CAUSES:
        c.add_row(cause, f"{att['counts'].get(cause, 0):,}", " ".join(att["samples"].get(cause, [])[:5]))
    return Group(t, c)
