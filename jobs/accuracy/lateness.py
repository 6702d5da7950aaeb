"""Lateness behind a stream's processing time (PT), the watermark delay it calls for, stream
synchronization (paper §5.2), and the watermark in force for each record of a run at a given
micro-batch cadence: pure numpy, shared by the recommendation and the report.

The one upper-quantile rule of joinshift lives here: :func:`recommend_watermark_delay`, and what
it rests on: :func:`quantile_basis` (a small sample is said, never silently taken at its maximum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np
import pandas as pd

__all__ = [
    "NO_MAX",
    "BatchClock",
    "Cadence",
    "batch_clock",
    "behind_maxima",
    "lateness_behind_pt",
    "quantile_basis",
    "recommend_watermark_delay",
    "share_behind_pt",
    "survives",
    "synchronization_gap",
]


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


# ------------------------------------------------------------------ the watermark in force, per record
#
# Spark's global watermark is min over the streams of (max event time seen − that stream's delay)
# (multipleWatermarkPolicy=min). Batch b reports the watermark computed from the maxima of the
# batches before it; with stateful operators chained (de-duplication, then the join) late rows of
# batch b are filtered with the PREVIOUS batch's watermark, i.e. the maxima of batches <= b − 2
# (jobs/accuracy/attribution.py WATERMARK_POLICIES; tests/integration/test_pipeline_e2e.py), and
# state is evicted with the current one (maxima of batches <= b − 1). A stream not seen yet counts
# as watermark 0: nothing is late.

#: Sentinel "no maximum yet" (µs): nobody is behind it.
NO_MAX = np.iinfo(np.int64).min // 4


@dataclass(frozen=True)
class Cadence:
    """How arrivals are cut into micro-batches: what moves the watermark, so every prediction names it.

    ``batch_s`` seconds of arrival time per micro-batch: a replay-as-live slice, or the live
    trigger interval. ``late_lag`` batches separate the maxima from the batch whose late filter
    uses them (2: the previous batch's watermark, chained stateful operators, no no-data batches).
    """

    batch_s: int
    replay: bool = True
    late_lag: int = 2

    def __post_init__(self) -> None:
        if self.batch_s <= 0:
            raise ValueError("batch_s must be a positive number of seconds")
        if self.late_lag < 1:
            raise ValueError("late_lag must be at least 1 batch")

    @property
    def evict_lag(self) -> int:
        return self.late_lag - 1

    def label(self) -> str:
        n = f"{self.batch_s // 60}-minute" if self.batch_s % 60 == 0 else f"{self.batch_s}-second"
        return f"replay-as-live with {n} slices" if self.replay else f"live, {n} trigger"


@dataclass(frozen=True)
class BatchClock:
    """Per micro-batch (non-empty arrival slices, in order): its end and each stream's running max."""

    slice_index: np.ndarray  # int64, arrival slice number (slice start = index × batch length)
    end_ms: np.ndarray  # int64, slice end (what a replay stamps as emitted_at)
    max_left_us: np.ndarray  # int64 running max event time through this batch, NO_MAX if unseen
    max_right_us: np.ndarray

    def batch_of(self, arrival_ms, cadence: Cadence) -> np.ndarray:
        """Batch number of each arrival (its slice must be one of the clock's)."""
        s = np.asarray(arrival_ms, dtype=np.int64) // (cadence.batch_s * 1000)
        b = np.searchsorted(self.slice_index, s)
        known = b < len(self.slice_index)
        if not known.all() or np.any(self.slice_index[b[known]] != s[known]):
            raise ValueError("an arrival falls in a slice the clock does not know")
        return b

    def maxima_at(self, batch, lag: int) -> tuple[np.ndarray, np.ndarray]:
        """Each stream's running max as of batch − lag (NO_MAX before the first batch)."""
        k = np.asarray(batch, dtype=np.int64) - lag
        ok = k >= 0
        kk = np.clip(k, 0, None)
        ml = np.where(ok, self.max_left_us[kk] if len(self.max_left_us) else NO_MAX, NO_MAX)
        mr = np.where(ok, self.max_right_us[kk] if len(self.max_right_us) else NO_MAX, NO_MAX)
        return ml, mr

    def watermark_us(self, left_delay_s: float, right_delay_s: float) -> np.ndarray:
        """Global watermark computed after each batch (µs); NO_MAX while a stream is unseen."""
        ml = np.where(self.max_left_us == NO_MAX, NO_MAX, self.max_left_us - int(left_delay_s * 1e6))
        mr = np.where(self.max_right_us == NO_MAX, NO_MAX, self.max_right_us - int(right_delay_s * 1e6))
        g = np.minimum(ml, mr)
        return np.maximum.accumulate(g) if len(g) else g


def batch_clock(cadence: Cadence, left_arrival_ms, left_event_us, right_arrival_ms, right_event_us) -> BatchClock:
    """The batches a run at ``cadence`` makes of these arrivals: one per non-empty slice (empty
    slices run no batch), each stream's running max event time through each."""
    step = cadence.batch_s * 1000
    sl = np.asarray(left_arrival_ms, dtype=np.int64) // step
    sr = np.asarray(right_arrival_ms, dtype=np.int64) // step
    slices = np.unique(np.concatenate([sl, sr]))

    def running(s, ev) -> np.ndarray:
        m = np.full(len(slices), NO_MAX, dtype=np.int64)
        np.maximum.at(m, np.searchsorted(slices, s), np.asarray(ev, dtype=np.int64))
        return np.maximum.accumulate(m) if len(m) else m

    return BatchClock(slices, (slices + 1) * step, running(sl, left_event_us), running(sr, right_event_us))


def behind_maxima(clock: BatchClock, batch, event_us, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """Per record: how far (µs) it is behind the left and the right stream's max as of the
    watermark that filters it (batch − lag). Very negative = nothing seen yet (never late)."""
    ml, mr = clock.maxima_at(batch, lag)
    ev = np.asarray(event_us, dtype=np.int64)
    return np.where(ml == NO_MAX, NO_MAX, ml - ev), np.where(mr == NO_MAX, NO_MAX, mr - ev)


def survives(behind_left, behind_right, left_delay_s: float, right_delay_s: float) -> np.ndarray:
    """Kept by the watermark: a record is dropped iff its event time is at or behind BOTH
    (left max − left delay) and (right max − right delay), i.e. behind their minimum."""
    return ~(
        (np.asarray(behind_left) >= int(left_delay_s * 1e6)) & (np.asarray(behind_right) >= int(right_delay_s * 1e6))
    )


# ------------------------------------------------------------------ quantiles that say what they rest on


def quantile_basis(n: int, target_drop_rate: float) -> str | None:
    """What a drop-share quantile of ``n`` records means, when it is not what it looks like.

    With ``floor(target × n) = 0`` no record may be later than the delay, so the "quantile" is the
    maximum lateness seen: say so, with the sample size that would make it a quantile. None when
    the sample is large enough.
    """
    if n <= 0:
        return "no records: no lateness measured, the delay is 0 by default, not by evidence"
    allowed = int(math.floor(float(target_drop_rate) * n + 1e-9))
    if allowed >= 1:
        return None
    need = int(math.ceil(1 / target_drop_rate)) if target_drop_rate > 0 else None
    return (
        f"rests on {n:,} records: a {100 * target_drop_rate:g}% drop target allows none of them to be late, "
        f"so this is the maximum lateness seen, not a quantile"
        + (f" (at least {need:,} records are needed for one)" if need else "")
    )
