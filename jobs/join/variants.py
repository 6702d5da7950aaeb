"""The paper's three batch baselines (§7.1) and the stream, and which right-stream days each reads.

* ``batch_1d_1d``       left ds ⋈ right ds, key equality only
* ``batch_1d_2d``       left ds ⋈ right ds and the neighbouring day(s) the window reaches into
                        (ds+1 for a positive upper bound, ds−1 for a negative lower bound), key only
* ``batch_1d_windowed`` left ds ⋈ right ds, restricted to the spec's window
"""

from __future__ import annotations

from datetime import date, timedelta

from jobs.spec import JoinSpec

BATCH_VARIANTS = ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed")
VARIANTS = (*BATCH_VARIANTS, "stream")


def right_days(spec: JoinSpec, variant: str, ds: date) -> list[date]:
    """Which right-stream partitions a variant reads for left partition ``ds``."""
    if variant not in BATCH_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(BATCH_VARIANTS)}, not {variant!r}")
    days = [ds]
    if variant == "batch_1d_2d":
        if spec.window.lower_seconds < 0:
            days.insert(0, ds - timedelta(days=1))
        if spec.window.upper_seconds > 0:
            days.append(ds + timedelta(days=1))
    return days


def missing_days(needed: list[date], landed: list[date]) -> list[date]:
    """Needed partitions not landed yet. Days before the first landed day are history the
    pipeline never had: they count as landed (and empty), not as missing."""
    first = min(landed) if landed else None
    return [d for d in needed if d not in landed and (first is None or d >= first)]
