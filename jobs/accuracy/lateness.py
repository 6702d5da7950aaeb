"""Lateness behind a stream's processing time (PT), the watermark delay it calls for, and stream
synchronization (paper §5.2): pure numpy, shared by the recommendation and the report.

The one upper-quantile rule of joinshift lives here: :func:`recommend_watermark_delay`.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import pandas as pd

__all__ = ["lateness_behind_pt", "recommend_watermark_delay", "share_behind_pt", "synchronization_gap"]


def lateness_behind_pt(series: pd.DataFrame, arrival_ms, event_ms) -> np.ndarray:
    """For every tuple (input order): the PT in force at its arrival minus its event time.

    The PT in force at wall-clock time ``t`` is the PT after the last micro-batch of ``series``
    that ended at or before ``t`` (as in :func:`pt_series`'s accuracy). Positive = the tuple
    arrived behind the PT (late) by that much; NaN when no PT was known yet.
    """
    for col in ("batch_end_ms", "pt_ms"):
        if col not in series.columns:
            raise ValueError(f"series must have a {col!r} column (see pt_series)")
    a = np.asarray(arrival_ms)
    e = np.asarray(event_ms, dtype=np.float64)
    if a.shape != e.shape:
        raise ValueError(f"arrival_ms and event_ms must have the same length, got {a.size} and {e.size}")
    ends = series["batch_end_ms"].to_numpy()
    pts = series["pt_ms"].to_numpy(dtype=np.float64)
    idx = np.searchsorted(ends, a, side="right") - 1
    pt_at = np.where(idx >= 0, pts[np.clip(idx, 0, None)] if len(pts) else np.nan, np.nan)
    return pt_at - e


def _finite(lateness_ms) -> np.ndarray:
    x = np.asarray(lateness_ms, dtype=np.float64).ravel()
    return x[~np.isnan(x)]


def share_behind_pt(lateness_ms, delay_ms: float = 0.0) -> float:
    """Share of tuples (with a known PT) whose lateness exceeds ``delay_ms``: the share a
    watermark of ``PT − delay_ms`` would drop. NaN when there is no such tuple."""
    if not isinstance(delay_ms, Real) or isinstance(delay_ms, bool) or delay_ms < 0:
        raise ValueError(f"delay_ms must be a number >= 0, got {delay_ms!r}")
    x = _finite(lateness_ms)
    if x.size == 0:
        return float("nan")
    return float(np.count_nonzero(x > delay_ms) / x.size)


def recommend_watermark_delay(lateness_ms, target_drop_rate: float) -> int:
    """Smallest integer delay ``d >= 0`` (ms) with ``share(lateness > d) <= target_drop_rate``.

    With ``n`` tuples, at most ``m = floor(target_drop_rate * n)`` may be later than ``d``, so
    ``d`` is the ``(n − m)``-th smallest lateness rounded up (an upper empirical quantile).
    NaN lateness (no PT yet) is ignored; no tuples → 0.
    """
    if (
        isinstance(target_drop_rate, bool)
        or not isinstance(target_drop_rate, Real)
        or not (0.0 <= float(target_drop_rate) <= 1.0)
    ):
        raise ValueError(f"target_drop_rate must be in [0, 1], got {target_drop_rate!r}")
    x = _finite(lateness_ms)
    n = x.size
    m = int(math.floor(float(target_drop_rate) * n + 1e-9))
    if n == 0 or m >= n:
        return 0
    kth = n - m - 1
    value = float(np.partition(x, kth)[kth])
    return max(0, int(math.ceil(value)))


def synchronization_gap(left_pt_ms, right_pt_ms, window_upper_ms):
    """How far the right stream's PT is from where synchronization wants it (paper §5.2).

    Synchronization keeps ``left_PT + window_upper_boundary = right_PT``. Returns
    ``right_PT − (left_PT + window_upper)``: positive = the right stream is ahead (pause it),
    negative = it is behind (pause the left stream), 0 = in sync. Works on scalars and on
    arrays (element-wise, NaN propagates); None if either scalar PT is None.
    """
    if left_pt_ms is None or right_pt_ms is None:
        return None
    if window_upper_ms is None:
        raise ValueError("window_upper_ms must be a number (ms), got None")
    gap = np.asarray(right_pt_ms, dtype=np.float64) - (
        np.asarray(left_pt_ms, dtype=np.float64) + np.asarray(window_upper_ms, dtype=np.float64)
    )
    return float(gap) if gap.ndim == 0 else gap
