"""What every candidate (window × left watermark × right watermark) costs and gives: the match
rate after late loss, the p99 output latency and the state memory, measured on the landed days.

Measured, not guessed: the landed days are reduced ONCE to the numbers that decide every
candidate (:class:`Observed`): per left event its ds, event time and micro-batch; per (left,
right) pair within the widest candidate window its offset ``d = r.t − l.t``, the right event's
time and batch; and per record how far it is behind each stream's max as of the watermark that
filters it (:mod:`jobs.accuracy.lateness`). Then numpy decides the grid:

* a record survives at delays ``(dL, dR)`` unless it is behind BOTH stream maxima by at least
  their delay (Spark's global watermark is the min, :func:`~jobs.accuracy.lateness.survives`);
* a left event is matched at ``[lower, upper]`` iff it survives and some surviving right event
  has ``lower <= d <= upper`` (key and any predicate were applied when the pairs were made);
* a matched row is output in the batch that reads the later of its pair; an unmatched left row
  (left outer) when the watermark evicting state passes ``l.t + upper``. Its latency is its
  output time (the batch's end) minus its latest event time; p99 over output rows;
* state memory: peak rows per second × how long a row stays in state × bytes per row
  (:mod:`jobs.accuracy.state_model`).

Every number is "for" a :class:`~jobs.accuracy.lateness.Cadence` (replay slices or a live
trigger): the watermark moves per micro-batch, so the cadence is part of the prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import numpy as np
import pandas as pd

from jobs.accuracy.lateness import NO_MAX, BatchClock, Cadence, behind_maxima, quantile_basis, survives
from jobs.accuracy.state_model import MemoryModel
from jobs.spec import JoinSpec

#: Columns of :func:`evaluate`'s result, one row per candidate.
COLUMNS = (
    "lower_s",
    "upper_s",
    "left_delay_s",
    "right_delay_s",
    "left_events",
    "matched_left",
    "match_rate",
    "window_rate",
    "p99_latency_s",
    "memory_bytes",
)
_BIG = np.iinfo(np.int64).max
#: Above this many left events, a hash sample of them decides the grid (and the output says so).
MAX_LEFT_EVENTS = 400_000


def p99(values) -> float:
    """The one p99 of output latency (predicted and measured alike): the empirical upper quantile."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    return float(np.quantile(x, 0.99, method="higher")) if x.size else float("nan")


@dataclass
class Observed:
    """The landed days reduced to what decides every candidate.

    Left arrays are per left event of ``days`` (in the sample); pair arrays per (left, right) pair
    within ``widest``, sorted by (left, d). ``sample_share`` < 1 says left events were sampled.
    """

    cadence: Cadence
    clock: BatchClock
    days: list[str]
    left_ds: np.ndarray  # index into days
    left_t_us: np.ndarray
    left_batch: np.ndarray
    pair_left: np.ndarray
    pair_d_us: np.ndarray
    pair_right_t_us: np.ndarray
    pair_right_batch: np.ndarray
    widest: tuple[int, int]
    left_outer: bool = True
    sample_share: float = 1.0
    #: the day-edge rule: ds -> right ds the widest window reaches that have not landed (its rates are lower bounds)
    waiting: dict[str, list[str]] = field(default_factory=dict)
    # derived
    left_behind: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)
    pair_behind: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)
    pair_latency_s: np.ndarray = field(init=False, repr=False)
    pair_bin: np.ndarray = field(init=False, repr=False)
    starts: np.ndarray = field(init=False, repr=False)
    group_left: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        order = np.lexsort((self.pair_d_us, self.pair_left))
        for name in ("pair_left", "pair_d_us", "pair_right_t_us", "pair_right_batch"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64)[order])
        lag = self.cadence.late_lag
        self.left_behind = behind_maxima(self.clock, self.left_batch, self.left_t_us, lag)
        self.pair_behind = behind_maxima(self.clock, self.pair_right_batch, self.pair_right_t_us, lag)
        emit = np.maximum(np.asarray(self.left_batch)[self.pair_left], self.pair_right_batch)
        latest = np.maximum(np.asarray(self.left_t_us)[self.pair_left], self.pair_right_t_us)
        self.pair_latency_s = self.clock.end_ms[emit] / 1e3 - latest / 1e6
        self.pair_bin = _bins(self.pair_latency_s)
        if len(self.pair_left):
            self.starts = np.flatnonzero(np.r_[True, np.diff(self.pair_left) != 0])
            self.group_left = self.pair_left[self.starts]
        else:
            self.starts = self.group_left = np.zeros(0, dtype=np.int64)

    @property
    def left_events(self) -> int:
        return len(self.left_t_us)

    def left_survival(self, dl: float, dr: float) -> np.ndarray:
        return survives(*self.left_behind, dl, dr)

    def pair_ok(self, dl: float, dr: float, left_ok: np.ndarray) -> np.ndarray:
        """Pairs whose both events survive."""
        return survives(*self.pair_behind, dl, dr) & left_ok[self.pair_left]

    def nearest_at_or_above(self, ok: np.ndarray, lower_s: int) -> np.ndarray:
        """Per left event with pairs (``group_left``): its smallest surviving d >= lower (µs), or BIG."""
        if not len(self.starts):
            return np.zeros(0, dtype=np.int64)
        dd = np.where(ok & (self.pair_d_us >= lower_s * 1_000_000), self.pair_d_us, _BIG)
        return np.minimum.reduceat(dd, self.starts)

    def unmatched_latency_s(self, dl: float, dr: float, upper_s: int) -> np.ndarray:
        """Per left event: when its unmatched row leaves (left outer), minus its event time, in s.

        The row leaves in the first batch whose eviction watermark has passed ``l.t + upper``
        (and not before the batch that read it); NaN if that is after the last observed batch.
        """
        g = self.clock.watermark_us(dl, dr)
        t = np.asarray(self.left_t_us, dtype=np.int64)
        k = np.searchsorted(g, t + upper_s * 1_000_000, side="left") + self.cadence.evict_lag
        e = np.maximum(k, self.left_batch)
        n = len(self.clock.end_ms)
        out = np.full(len(t), np.nan)
        ok = e < n
        out[ok] = self.clock.end_ms[e[ok]] / 1e3 - t[ok] / 1e6
        return out


def _window_matches(obs: Observed, ok: np.ndarray, windows: list[tuple[int, int]]) -> dict[tuple[int, int], np.ndarray]:
    """Per window: the ``group_left`` mask of left events with a surviving pair in it."""
    out, cache = {}, {}
    for a, b in windows:
        if a not in cache:
            cache[a] = obs.nearest_at_or_above(ok, a)
        out[(a, b)] = cache[a] <= b * 1_000_000
    return out


#: Predicted latencies are counted in bins this wide (the p99 is a bin's upper edge): the grid
#: then costs O(rows) per delay pair, not a sort per candidate.
LATENCY_BIN_S = 30
_LAT_LO, _LAT_HI = -86_400, 7 * 86_400  # latencies outside are clipped into the end bins
_NBINS = (_LAT_HI - _LAT_LO) // LATENCY_BIN_S


def _bins(latency_s: np.ndarray) -> np.ndarray:
    b = np.floor((np.nan_to_num(latency_s, nan=_LAT_LO) - _LAT_LO) / LATENCY_BIN_S)
    return np.clip(b, 0, _NBINS - 1).astype(np.int64)


def _p99_of_hist(hist: np.ndarray) -> float:
    """Upper edge of the bin holding the p99 (``p99``'s "higher" rank) of binned latencies."""
    n = int(hist.sum())
    if n == 0:
        return float("nan")
    rank = int(np.ceil(0.99 * (n - 1)))  # 0-based rank of np.quantile(..., method="higher")
    i = int(np.searchsorted(np.cumsum(hist), rank + 1))
    return float(_LAT_LO + (i + 1) * LATENCY_BIN_S)


def window_rates(obs: Observed, windows: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Per window: the share of left events with a partner in it, nothing dropped (its ceiling)."""
    n = obs.left_events
    ideal = _window_matches(obs, np.ones(len(obs.pair_left), dtype=bool), windows)
    return {w: float(m.sum()) / n if n else float("nan") for w, m in ideal.items()}


def _pair_hists(obs: Observed, ok: np.ndarray, points_us: list[int]) -> tuple[dict[int, np.ndarray], dict]:
    """Latency histograms of surviving pairs with ``d <= p`` and ``d < p``, per bound point ``p``."""
    d, lat = obs.pair_d_us[ok], obs.pair_bin[ok]
    order = np.argsort(d, kind="stable")
    d, lat = d[order], lat[order]
    cuts = sorted({0, len(d), *(int(np.searchsorted(d, p, side=s)) for p in points_us for s in ("left", "right"))})
    acc, at = np.zeros(_NBINS, dtype=np.int64), {}
    for x, y in zip(cuts, cuts[1:]):
        at[x] = acc.copy()
        acc += np.bincount(lat[x:y], minlength=_NBINS)
    at[cuts[-1]] = acc
    le = {p: at[int(np.searchsorted(d, p, side="right"))] for p in points_us}
    lt = {p: at[int(np.searchsorted(d, p, side="left"))] for p in points_us}
    return le, lt


def evaluate(
    obs: Observed,
    windows: list[tuple[int, int]],
    left_delays: list[int],
    right_delays: list[int],
    memory: MemoryModel,
    *,
    combos: list[tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """Every window × (left delay, right delay) (or the given ``combos``): :data:`COLUMNS`.
    ``p99_latency_s`` is over output rows, to :data:`LATENCY_BIN_S`."""
    lo, hi = obs.widest
    for a, b in windows:
        if a < lo or b > hi:
            raise ValueError(f"window [{a}, {b}] s is outside the widest window the pairs were made for")
    n = obs.left_events
    window_rate = window_rates(obs, windows)
    points = sorted({p * 1_000_000 for w in windows for p in w})
    rows = []
    pairs = combos if combos is not None else [(dl, dr) for dl in left_delays for dr in right_delays]
    for dl, dr in pairs:
        left_ok = obs.left_survival(dl, dr) if n else np.ones(0, dtype=bool)
        ok = obs.pair_ok(dl, dr, left_ok)
        matched = _window_matches(obs, ok, windows)
        le, lt = _pair_hists(obs, ok, points)
        unmatched_bins: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for (a, b), m in matched.items():
            hist = le[b * 1_000_000] - lt[a * 1_000_000]
            if obs.left_outer and n:
                if b not in unmatched_bins:
                    lat = obs.unmatched_latency_s(dl, dr, b)
                    unmatched_bins[b] = (_bins(lat), left_ok & ~np.isnan(lat))
                bins, out = unmatched_bins[b]
                w = out.copy()
                w[obs.group_left[m]] = False
                hist = hist + np.bincount(bins[w], minlength=_NBINS)
            k = int(m.sum())
            rows.append(
                (
                    a,
                    b,
                    dl,
                    dr,
                    n,
                    k,
                    k / n if n else float("nan"),
                    window_rate[(a, b)],
                    _p99_of_hist(hist),
                    memory.bytes(a, b, dl, dr, obs.cadence),
                )
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def per_ds_rates(obs: Observed, window: tuple[int, int], dl: int, dr: int) -> dict[str, float]:
    """The predicted match rate of one candidate per ds (what a verification run is compared with)."""
    left_ok = obs.left_survival(dl, dr)
    m = _window_matches(obs, obs.pair_ok(dl, dr, left_ok), [window])[window]
    matched = np.zeros(obs.left_events, dtype=bool)
    matched[obs.group_left[m]] = True
    out = {}
    for i, ds in enumerate(obs.days):
        mine = obs.left_ds == i
        out[ds] = float(matched[mine].mean()) if mine.any() else float("nan")
    return out


# ------------------------------------------------------------------------------ I/O shell


@dataclass
class StreamLateness:
    """How late one stream's records are behind the watermark's maxima, and what the delays drop."""

    records: int
    deployed_delay_s: int
    chosen_delay_s: int
    share_dropped_at_deployed: float  # dropped by the watermark, both delays deployed
    share_dropped_at_chosen: float
    lateness_p50_s: float  # behind the stream's own max at its batch
    lateness_p99_s: float
    lateness_max_s: float
    note: str | None = None  # what the p99 rests on, when the sample is small


def observe(
    spark,
    spec: JoinSpec,
    days: list[date],
    cadence: Cadence,
    widest: tuple[int, int],
    s=None,
    *,
    keys: bool = False,
    max_left_events: int | None = None,
) -> tuple[Observed, dict[str, Any]]:
    """Read the landed days once: the :class:`Observed` arrays, and per stream its records' (id, ds,
    arrival ms, event µs) for the evidence; with ``keys`` also each record's join key (the paced
    engine's prediction, :mod:`jobs.accuracy.paced_model`). Right events (and the
    watermark's history) come from every arrival ds the widest candidate window reaches, and at
    least ``days[0] − 1 .. days[-1] + 1``, as far as they have landed. Over ``max_left_events``
    (default :data:`MAX_LEFT_EVENTS`) left events a hash sample of them is kept: the arrays are
    the driver's memory (one candidate held to a trial takes a higher cap: a sample's error would
    eat the promise)."""
    from pyspark.sql import functions as F

    from jobs.accuracy.lateness import batch_clock
    from jobs.join.columns import ARRIVAL_TIME, col_name
    from jobs.join.conditions import match_condition, predicate_columns
    from jobs.join.variants import missing_days, window_day_offsets
    from jobs.steps.batch import landed_days
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    reach = window_day_offsets(*widest, spec.timezone)  # a window longer than a day reaches N days
    landed_right = landed_days(spark, tables, "right")
    waiting = {
        str(d): [str(m) for m in missing_days([d + timedelta(days=o) for o in reach], landed_right)] for d in days
    }
    span = [min(days) + timedelta(days=min(-1, reach[0])), max(days) + timedelta(days=max(1, reach[-1]))]
    landed = {
        side: delta_io.read_table(spark, tables.landed(side), made_by=f"joinshift land --ds {min(days)}").where(
            F.col("ds").between(*span)
        )
        for side in ("left", "right")
    }
    rec: dict[str, Any] = {}
    for side in ("left", "right"):
        st = spec.side(side)
        rec[side] = (
            landed[side]
            .select(
                F.col(st.id).cast("string").alias("id"),
                F.col("ds").cast("string").alias("ds"),
                *([F.concat_ws("\u001f", *[F.col(k).cast("string") for k in st.key]).alias("k")] if keys else []),
                F.unix_millis(ARRIVAL_TIME).alias("a"),
                F.unix_micros(st.event_time).alias("e"),
            )
            .toPandas()
        )
    clock = batch_clock(cadence, rec["left"].a, rec["left"].e, rec["right"].a, rec["right"].e)
    day_names = [str(d) for d in days]
    left = rec["left"][rec["left"].ds.isin(day_names)].reset_index(drop=True)
    cap = MAX_LEFT_EVENTS if max_left_events is None else max_left_events
    share = min(1.0, cap / len(left)) if len(left) else 1.0
    lsrc = landed["left"].where(F.col("ds").isin(days))
    if share < 1:
        keep = (F.abs(F.xxhash64(F.col(spec.left.id).cast("string"))) % 10_000) < int(share * 10_000)
        lsrc = lsrc.where(keep)
        left = left[left.id.isin({r[0] for r in lsrc.select(F.col(spec.left.id).cast("string")).collect()})]
        left = left.reset_index(drop=True)
    lt, rt = col_name("left", spec.left.event_time), col_name("right", spec.right.event_time)
    lneed = {*spec.left.key, spec.left.event_time, spec.left.id, *predicate_columns(spec, "left")}
    rneed = {*spec.right.key, spec.right.event_time, *predicate_columns(spec, "right")}
    lcols = [F.col(c).alias(col_name("left", c)) for c in lneed]
    rcols = [F.col(c).alias(col_name("right", c)) for c in rneed]
    wide = spec.with_window(timedelta(seconds=widest[0]), timedelta(seconds=widest[1]))
    pairs: Any = (
        lsrc.select(*lcols)
        .join(
            landed["right"].select(*rcols, F.col(ARRIVAL_TIME).alias("_ra")),
            match_condition(wide),  # key, the widest window and the spec's predicate
        )
        .select(
            F.col(col_name("left", spec.left.id)).cast("string").alias("lid"),
            (F.unix_micros(rt) - F.unix_micros(lt)).alias("d"),
            F.unix_micros(rt).alias("rt"),
            F.unix_millis("_ra").alias("ra"),
        )
        .toPandas()
    )
    # by id, not position: a left row is a left event (an id landed twice pairs twice, as it counts twice)
    pairs = pairs.merge(pd.DataFrame({"lid": left.id, "_li": np.arange(len(left))}), on="lid")
    pl = pairs._li.to_numpy(np.int64)
    obs = Observed(
        cadence=cadence,
        clock=clock,
        days=day_names,
        left_ds=pd.Categorical(left.ds, categories=day_names).codes.astype(np.int64),
        left_t_us=left.e.to_numpy(np.int64),
        left_batch=clock.batch_of(left.a, cadence),
        pair_left=pl,
        pair_d_us=pairs.d.to_numpy(np.int64),
        pair_right_t_us=pairs.rt.to_numpy(np.int64),
        pair_right_batch=clock.batch_of(pairs.ra, cadence),
        widest=widest,
        left_outer=spec.join.type.value == "left_outer",
        sample_share=share,
        waiting={d: w for d, w in waiting.items() if w},
    )
    return obs, rec


def stream_lateness(spec: JoinSpec, rec: dict, obs: Observed, chosen: Any) -> dict[str, StreamLateness]:
    """Per stream: its records' lateness behind its own max, and the share the deployed and the
    chosen (``left_delay_s``, ``right_delay_s``) watermarks drop, with what the p99 rests on."""
    out = {}
    for side in ("left", "right"):
        r = rec[side]
        b = obs.clock.batch_of(r.a, obs.cadence)
        behind = behind_maxima(obs.clock, b, r.e, obs.cadence.late_lag)
        own = np.clip(behind[0 if side == "left" else 1], 0, None) / 1e6 if len(r) else np.zeros(0)

        dep_kept = survives(*behind, spec.left.watermark_seconds, spec.right.watermark_seconds)
        chosen_kept = survives(*behind, chosen.left_delay_s, chosen.right_delay_s)
        qs = np.percentile(own, [50, 99, 100]) if len(own) else np.zeros(3)
        note = quantile_basis(len(r), 0.01)
        out[side] = StreamLateness(
            int(len(r)),
            spec.side(side).watermark_seconds,
            chosen.left_delay_s if side == "left" else chosen.right_delay_s,
            1 - float(dep_kept.mean()) if len(r) else 0.0,
            1 - float(chosen_kept.mean()) if len(r) else 0.0,
            float(qs[0]),
            float(qs[1]),
            float(qs[2]),
            f"p99 {note}" if note else None,
        )
    return out


__all__ = [
    "COLUMNS",
    "NO_MAX",
    "Observed",
    "StreamLateness",
    "evaluate",
    "observe",
    "p99",
    "per_ds_rates",
    "stream_lateness",
    "window_rates",
]
