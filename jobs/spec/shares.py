"""Shares for people: one rule for every percentage the CLI, the report and the UI print.

A share that is not all is never shown as ``100.00%``, nor one that is not nothing as ``0.00%``:
at the digits asked, 999,999 of 1,000,000 reads ``99.99%``, not a false "everything matched".
"""

from __future__ import annotations

import math
from typing import Any

DASH = "—"


def num(v: Any) -> float | None:
    """A finite float, or None for None/NaN/inf/non-numbers."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def pct(v: Any, digits: int = 2) -> str:
    """A fraction as a percentage: ``0.925 -> "92.50%"``; missing -> "—"."""
    f = num(v)
    if f is None:
        return DASH
    shown, step = round(100 * f, digits), 10.0**-digits
    if shown >= 100 and f < 1:
        shown = 100 - step
    elif shown <= 0 < f:
        shown = step
    return f"{shown:.{digits}f}%"


def gap_pp(rate: float, baseline: float) -> float:
    """The stream's rate less the baseline's, in percentage points; rounded at 1e-9 pp so that a
    gap of exactly the tolerance is not failed by float noise."""
    return round(100 * (rate - baseline), 9)


def within_tolerance(rate: float, baseline: float, tolerance_pp: float) -> bool:
    """The one verdict on a measured day (gate, GX gate, report, UI): the stream's match rate is
    at least the baseline's less ``accuracy.tolerance_pp``."""
    return gap_pp(rate, baseline) >= -tolerance_pp
