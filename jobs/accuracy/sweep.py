"""One-pass window sweep: the match rate of many candidate windows for the cost of about one join.

Paper §6.5 / §7.2: choosing the window ``[lower, upper]`` trades match rate against state size
and latency. Instead of running the windowed batch join once per candidate, :func:`sweep` joins
the left and right events once, with the *widest* candidate window (left outer, so left events
without any pair are still counted: unmatched for every candidate), and keeps per pair just
enough to decide every narrower window.

*Cells*: the sorted distinct bounds ``p_0 < … < p_{n−1}`` of all candidates cut the widest window
into ``2n − 1`` cells (point ``p_x`` is cell ``2x``, the open gap after it cell ``2x + 1``); a
pair's offset ``d = right.t − left.t`` (exact, in microseconds) lies in one, and candidate
``[p_x, p_y]`` is cells ``2x..2y``. A left event matches it iff some ``d`` lies there (min/max of
``d`` alone would not do: offsets {−5h, +5h} match [−6h, +6h], not [−1h, +1h]). Two exact ways
to count that (:func:`sweep` picks):

* **previous-pair histogram** (the default). A left event matches ``[a, b]`` iff exactly one of
  its pairs is its first at or after ``a`` and lies at or before ``b``: the pair with
  ``a <= d <= b`` whose *previous* pair lies below ``a``. Its previous pair is the right event
  just before this one on the same key (and for the same left ds), so one ``lag`` over the
  right events, before the join, gives it to every pair. ONE aggregation then counts pairs per
  (ds, cell of the previous offset, cell of ``d``): a few thousand rows, whatever the data;
  numpy's prefix sums decide every candidate: matched = pairs whose previous cell is below
  ``2x`` and cell in ``2x..2y``; pairs in the window = pairs with cell in ``2x..2y``; left
  events = unpaired left rows + pairs without a previous one. No per-left-event aggregation.
* **cell sets**, when the spec's predicate names a left column (the previous right event a
  left event may pair with then depends on the left event). ONE aggregation per left event
  ORs the cells of its pairs into a bit set (one long per 63 cells) and counts its pairs below /
  up to each point; a second one per (ds, bit set) leaves few rows; numpy: matched = left
  events whose bits meet the candidate's cells, pairs ``= #(d <= b) − #(d < a)``.

K does not even enter the Spark plan, only the number of distinct bounds does.

Match rate = matched left events ÷ all left events of the ds (as in :mod:`jobs.accuracy.compare`); a left
event is one left row (landed event ids are unique, so this is compare's distinct-id count too).
``pairs`` counts every (left, right) pair in the window, i.e. the 1-to-n output rows that have a
right side, whatever the spec's cardinality (under 1-to-1 the join emits ``matched_left`` of
them): what state and output sizes follow.

Which right events may pair with a left event of ds ``D`` (``right_days``):

* ``"all"``        -- every right row passed in (exactly ``join_events(left, right, ..., windowed=True)``);
* ``"same"``       -- right rows of the same ds: ``batch_1d_windowed`` semantics (the paper's
                      batch-1d-to-3.5h), even when several ds are swept together;
* ``"neighbours"`` -- right rows of every ds the widest window reaches, ``D + floor(lower / 1d)``
                      .. ``D + ceil(upper / 1d)`` (:func:`jobs.join.variants.window_day_offsets`;
                      a day of 23 h in a zone with daylight saving):
                      the ``reference`` variant's read set, restricted to the window -- what a
                      stream sees across midnight (for a window within a day: ``D−1`` if the
                      lower bound is negative, ``D``, ``D+1`` if the upper bound is positive).

The spec's ``join.predicate``, if any, is part of the one join (:func:`jobs.join.conditions.match_condition`);
one that names right columns only also filters the right events before their previous one is found.

Candidate grids: :mod:`jobs.accuracy.grid`.

Command line (reads the landed tables; prints one line per ds × candidate)::

    joinshift sweep --ds 2026-11-20 \\
        --grid "lower=-6h..0/30m,upper=0..6h/30m" [--right-days same|neighbours]
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from functools import reduce
from math import gcd

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.accuracy.grid import check_candidates, widest
from jobs.join.columns import col_name
from jobs.join.conditions import match_condition, predicate_columns, predicate_sql
from jobs.join.variants import window_day_offsets
from jobs.settings import Settings
from jobs.spec import JoinSpec

#: Columns of :func:`sweep`'s result, one row per ds × candidate.
RESULT_COLUMNS = ("ds", "lower_s", "upper_s", "left_events", "matched_left", "match_rate", "pairs")
RIGHT_DAYS = ("all", "same", "neighbours")

_US = 1_000_000


# ------------------------------------------------------------------------------- the sweep


def neighbour_offsets(lower_s: int, upper_s: int, timezone: str) -> list[int]:
    """Right ds offsets (days) a left ds reads under ``right_days="neighbours"``: every day the
    window reaches, the same rule as the ``reference`` variant."""
    return window_day_offsets(lower_s, upper_s, timezone)


def _cell_tree(d: Column, points: Sequence[int], i: int, j: int) -> Column:
    """Cell of an offset ``d`` known to lie in ``[points[i], points[j]]`` (binary search as nested CASE):
    ``2k`` if ``d == points[k]``, ``2k + 1`` if ``points[k] < d < points[k + 1]``."""
    if i == j:
        return F.lit(2 * i)
    if j == i + 1:
        return (
            F.when(d == F.lit(points[i]), F.lit(2 * i))
            .when(d == F.lit(points[j]), F.lit(2 * j))
            .otherwise(F.lit(2 * i + 1))
        )
    mid = (i + j) // 2
    return F.when(d < F.lit(points[mid]), _cell_tree(d, points, i, mid)).otherwise(_cell_tree(d, points, mid, j))


#: Largest lookup table :func:`_cell_of` builds; beyond it, a binary search in CASE expressions.
_LOOKUP_MAX = 4096


def _cell_of(d: Column, points_s: Sequence[int]) -> Column:
    """Cell of an offset ``d`` (microseconds, within ``[points_s[0], points_s[-1]]`` seconds).

    The points lie on a grid of step ``g`` (the gcd of their gaps): grid line ``q`` below ``d``
    and whether ``d`` is on it come from one integer division, and two constant arrays map the
    line to the cell (``d`` on a line that is a point: that point's cell; otherwise the gap after
    the largest point <= the line). Small generated code, O(1) per pair, whatever the number of
    points; a grid with too many lines falls back to a binary search in CASE expressions.
    """
    if len(points_s) == 1:
        return F.lit(0)
    step = reduce(gcd, (b - a for a, b in zip(points_s, points_s[1:])))
    lines = (points_s[-1] - points_s[0]) // step + 1
    if lines > _LOOKUP_MAX:
        return _cell_tree(d, [p * _US for p in points_s], 0, len(points_s) - 1)
    index = {(p - points_s[0]) // step: x for x, p in enumerate(points_s)}
    on_line, between, x = [], [], -1
    for q in range(lines):
        if q in index:
            x = index[q]
        on_line.append(2 * x if q in index else 2 * x + 1)
        between.append(2 * x + 1)
    off = d - F.lit(points_s[0] * _US)
    rem = F.pmod(off, F.lit(step * _US))
    q1 = ((off - rem) / F.lit(step * _US)).cast("int") + 1  # exact: off - rem is a multiple
    return F.when(rem == 0, F.element_at(F.lit(on_line), q1)).otherwise(F.element_at(F.lit(between), q1))


def _bits(lo_bit: int, hi_bit: int) -> int:
    """A long with bits ``lo_bit..hi_bit`` set (0 <= lo_bit <= hi_bit < 63)."""
    return ((1 << (hi_bit + 1)) - 1) ^ ((1 << lo_bit) - 1)


class _Cells:
    """The cells of a candidate set: sorted distinct bound points, bit layout, selection masks."""

    BITS = 63  # cells per long (the sign bit stays clear)

    def __init__(self, cands: Sequence[tuple[int, int]]):
        self.cands = list(cands)
        self.lo, self.hi = widest(self.cands)
        self.lowers = sorted({a for a, _ in self.cands})
        self.uppers = sorted({b for _, b in self.cands})
        self.points = sorted({*self.lowers, *self.uppers})
        self.at = {p: x for x, p in enumerate(self.points)}
        self.n_masks = -(-(2 * len(self.points) - 1) // self.BITS)
        self.masks = [f"_mask{c}" for c in range(self.n_masks)]
        #: pairs with d below each lower point (none below the widest) and up to each upper point
        self.below = {a: f"_lt{self.at[a]}" for a in self.lowers if a > self.lo}
        self.upto = {b: f"_le{self.at[b]}" for b in self.uppers}

    def selection(self, a: int, b: int) -> list[int]:
        """Per mask long, the bits of cells ``2x..2y`` of candidate ``[p_x, p_y]``."""
        first, last = 2 * self.at[a], 2 * self.at[b]
        out = []
        for c in range(self.n_masks):
            lo_bit, hi_bit = max(first, self.BITS * c), min(last, self.BITS * c + self.BITS - 1)
            out.append(_bits(lo_bit - self.BITS * c, hi_bit - self.BITS * c) if lo_bit <= hi_bit else 0)
        return out


def _sides(left: DataFrame, right: DataFrame, spec: JoinSpec) -> tuple[DataFrame, DataFrame]:
    """The join's columns, prefixed: keys, the predicate's other columns, event time, and ds (the
    right's as ``_right_ds``)."""

    def side(df: DataFrame, name: str, ds: Column) -> DataFrame:
        s = spec.side(name)
        own = [*s.key, *(c for c in predicate_columns(spec, name) if c not in (*s.key, s.event_time)), s.event_time]
        return df.select(*[F.col(c).alias(col_name(name, c)) for c in dict.fromkeys(own)], ds)

    return side(left, "left", F.col("ds")), side(right, "right", F.col("ds").alias("_right_ds"))


def _pair_histogram(left: DataFrame, right: DataFrame, spec: JoinSpec, cl: _Cells, right_days: str) -> DataFrame:
    """The lazy Spark part of the previous-pair histogram: rows ``ds, _prev_cell, _cell, _n``.

    Each right event carries the time of the right event just before it that the same left
    events can pair with: the same key, and (``same``/``neighbours``) the same left ds it is read
    for (``_target``; under ``neighbours`` a right event is read for up to three left ds). Per
    pair, the cell of its offset and of the previous one's (-1: none within the widest window);
    a left event without a pair has a null cell.
    """
    l_df, r_df = _sides(left, right, spec)
    lt, rt = col_name("left", spec.left.event_time), col_name("right", spec.right.event_time)
    extra = predicate_sql(spec)
    if extra is not None:  # it names right columns only (see sweep): filter the right events first
        r_df = r_df.where(F.expr(extra))
    r_df = r_df.where(F.col(rt).isNotNull())
    group = [col_name("right", k) for k in spec.right.key]
    cond = match_condition(spec.with_window(timedelta(seconds=cl.lo), timedelta(seconds=cl.hi)))
    if right_days != "all":
        offsets = [0] if right_days == "same" else neighbour_offsets(cl.lo, cl.hi, spec.timezone)
        # left ds D reads right ds R iff R - D is one of the offsets, i.e. D = R - offset
        targets = [F.date_sub(F.col("_right_ds"), o) for o in offsets]
        r_df = r_df.withColumn("_target", targets[0] if len(targets) == 1 else F.explode(F.array(*targets)))
        group.append("_target")
        cond = cond & (F.col("_target") == F.col("ds"))
    # right events at one time: either may come first, the other's previous offset then equals its own
    r_df = r_df.withColumn("_prev_t", F.lag(rt).over(Window.partitionBy(*group).orderBy(rt)))
    pairs = l_df.join(r_df, cond, "left")
    left_us = F.unix_micros(F.col(lt))
    d = F.unix_micros(F.col(rt)) - left_us
    prev = F.unix_micros(F.col("_prev_t")) - left_us
    return pairs.groupBy(
        "ds",
        F.when(prev >= F.lit(cl.lo * _US), _cell_of(prev, cl.points)).otherwise(F.lit(-1)).alias("_prev_cell"),
        F.when(d.isNotNull(), _cell_of(d, cl.points)).alias("_cell"),
    ).agg(F.count(F.lit(1)).alias("_n"))


def _decide_by_histogram(rows: list, cl: _Cells, cands: Sequence[tuple[int, int]]) -> list[tuple]:
    """Every candidate per ds from the previous-pair histogram (prefix sums, no loop over K)."""
    n = 2 * len(cl.points) - 1
    first = np.array([2 * cl.at[a] for a, _ in cands])  # candidate [p_x, p_y] is cells 2x..2y:
    end = np.array([2 * cl.at[b] + 1 for _, b in cands])  # first..end - 1
    out = []
    for ds in sorted({r["ds"] for r in rows}):
        hist = np.zeros((n + 1, n), dtype=np.int64)  # row: previous cell + 1, so 0 = no previous pair
        unpaired = 0
        for r in rows:
            if r["ds"] != ds:
                continue
            if r["_cell"] is None:
                unpaired += r["_n"]
            else:
                hist[r["_prev_cell"] + 1, r["_cell"]] += r["_n"]
        below = np.zeros((n + 2, n + 1), dtype=np.int64)  # below[k, j]: pairs in rows < k, cells < j
        below[1:, 1:] = hist.cumsum(0).cumsum(1)
        matched = below[first + 1, end] - below[first + 1, first]  # previous cell < first, cell in the window
        pairs = below[n + 1, end] - below[n + 1, first]
        total = unpaired + int(below[1, n])  # a paired left event has one pair in row 0: its first
        out += [(ds, a, b, total, int(m), int(p)) for (a, b), m, p in zip(cands, matched, pairs)]
    return out


def _cell_sets(left: DataFrame, right: DataFrame, spec: JoinSpec, cl: _Cells, right_days: str) -> DataFrame:
    """The lazy Spark part of the cell sets: left events counted per ds and *cell set*.

    Per left event ONE bit set of the cells its offsets fall in (``_mask0``, ``_mask1``, …: 63
    cells per long; 0 for a left event without a pair); it matches ``[p_x, p_y]`` iff one of the
    bits ``2x..2y`` is set. Rows: ``ds``, the masks, ``_n`` (left events with that cell set),
    ``_lt<x>`` / ``_le<x>`` (their pairs with ``d`` below lower point ``x`` / up to upper point
    ``x``). Few rows: left events share few distinct cell sets.
    """
    l_df, r_df = _sides(left, right, spec)
    lt, rt = col_name("left", spec.left.event_time), col_name("right", spec.right.event_time)
    lkeys = [col_name("left", k) for k in spec.left.key]
    # a left event is a left row: a row id, so nothing depends on event ids being unique
    l_df = l_df.withColumn("_lid", F.monotonically_increasing_id())
    cond = match_condition(spec.with_window(timedelta(seconds=cl.lo), timedelta(seconds=cl.hi)))
    if right_days == "same":
        cond = cond & (F.col("_right_ds") == F.col("ds"))
    elif right_days == "neighbours":
        cond = cond & F.datediff(F.col("_right_ds"), F.col("ds")).isin(neighbour_offsets(cl.lo, cl.hi, spec.timezone))
    # Left events hash-partitioned by the equi-join keys up front: whether Spark then broadcasts the
    # right side or sort-merges, the join output keeps that partitioning, so the per-left
    # aggregation below (grouped by the key too) runs without another shuffle.
    l_df = l_df.repartition(*lkeys, *(["ds"] if right_days == "same" else []))
    pairs = l_df.join(r_df, cond, "left")
    # exact offset in microseconds (null for a left event without any pair), and its cell
    d = F.unix_micros(F.col(rt)) - F.unix_micros(F.col(lt))
    cell_of_d = F.when(d.isNotNull(), _cell_of(d, cl.points))
    cell = F.col("_cell")

    def mask_of(c: int) -> Column:
        if cl.n_masks == 1:
            return F.expr("shiftleft(1L, _cell)")
        return F.when(
            cell.between(cl.BITS * c, cl.BITS * c + cl.BITS - 1), F.expr(f"shiftleft(1L, _cell - {cl.BITS * c})")
        )

    per_left = (
        pairs.select(*lkeys, "_lid", "ds", cell_of_d.alias("_cell"))
        .groupBy(*lkeys, "_lid", "ds")
        .agg(
            *[F.coalesce(F.bit_or(mask_of(c)), F.lit(0).cast("long")).alias(m) for c, m in enumerate(cl.masks)],
            *[F.count(F.when(cell < 2 * cl.at[a], True)).alias(col) for a, col in cl.below.items()],
            *[F.count(F.when(cell <= 2 * cl.at[b], True)).alias(col) for b, col in cl.upto.items()],
        )
    )
    # K never enters the plan: candidates are decided on these few rows
    return per_left.groupBy("ds", *cl.masks).agg(
        F.count(F.lit(1)).alias("_n"), *[F.sum(col).alias(col) for col in (*cl.below.values(), *cl.upto.values())]
    )


def _decide_by_cell_sets(rows: list, cl: _Cells, cands: Sequence[tuple[int, int]]) -> list[tuple]:
    """Every candidate per ds from the cell sets: matched = left events whose bits meet the
    candidate's cells, pairs ``= #(d <= b) - #(d < a)``."""
    sel = np.array([cl.selection(a, b) for a, b in cands], dtype=np.int64)  # K × masks
    out = []
    for ds in sorted({r["ds"] for r in rows}):
        mine = [r for r in rows if r["ds"] == ds]
        masks = np.array([[r[m] for m in cl.masks] for r in mine], dtype=np.int64)  # rows × masks
        n = np.array([r["_n"] for r in mine], dtype=np.int64)
        matched = np.zeros(len(cands), dtype=np.int64)
        step = max(1, 4_000_000 // (len(cands) * cl.n_masks))  # bounded memory
        for i in range(0, len(mine), step):
            hit = ((masks[i : i + step, None, :] & sel[None, :, :]) != 0).any(axis=2)  # rows × K
            matched += n[i : i + step] @ hit
        total = int(n.sum())
        sums = {col: sum(int(r[col] or 0) for r in mine) for col in (*cl.below.values(), *cl.upto.values())}
        for k, (a, b) in enumerate(cands):
            pairs = sums[cl.upto[b]] - (sums[cl.below[a]] if a in cl.below else 0)
            out.append((ds, a, b, total, int(matched[k]), pairs))
    return out


#: How :func:`sweep` decides the candidates (see the module's docstring).
METHODS = ("histogram", "cell-sets")


def sweep(
    left: DataFrame,
    right: DataFrame,
    spec: JoinSpec,
    candidates: Sequence[tuple[int, int]],
    *,
    right_days: str = "all",
    method: str | None = None,
) -> pd.DataFrame:
    """Match rate (and pairs) per ds × candidate window, from landed-shape left/right events.

    One Spark job (one join and its aggregation, see the module's docstring), then every candidate
    is decided on the collected rows with numpy. ``method``: ``"histogram"`` unless the spec's
    predicate names a left column, where only ``"cell-sets"`` is exact (the default picks).
    Returns a pandas frame with :data:`RESULT_COLUMNS`, sorted by ds, lower_s, upper_s; ``ds`` is
    the left's ds.

    Example::

        rates = sweep(left_ds, right_ds, spec, parse_grid("lower=-6h..0/30m,upper=0..6h/30m"),
                      right_days="same")  # parse_grid: jobs.accuracy.grid
    """
    if right_days not in RIGHT_DAYS:
        raise ValueError(f"right_days must be one of {', '.join(RIGHT_DAYS)}, not {right_days!r}")
    left_predicate = bool(predicate_columns(spec, "left"))
    method = method or ("cell-sets" if left_predicate else "histogram")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if method == "histogram" and left_predicate:
        raise ValueError("method 'histogram' cannot apply a predicate that names a left column: use 'cell-sets'")
    cands = check_candidates(candidates)
    cl = _Cells(cands)
    if method == "histogram":
        out = _decide_by_histogram(_pair_histogram(left, right, spec, cl, right_days).collect(), cl, cands)
    else:
        out = _decide_by_cell_sets(_cell_sets(left, right, spec, cl, right_days).collect(), cl, cands)
    res = pd.DataFrame(
        [(ds, a, b, n, m, m / n if n else float("nan"), p) for ds, a, b, n, m, p in out], columns=list(RESULT_COLUMNS)
    )
    res = res.astype(
        {
            "lower_s": "int64",
            "upper_s": "int64",
            "left_events": "int64",
            "matched_left": "int64",
            "match_rate": "float64",
            "pairs": "int64",
        }
    )
    return res.sort_values(["ds", "lower_s", "upper_s"], ignore_index=True)


# ------------------------------------------------------------------------------- I/O shell


def right_read_days(
    ds_list: Sequence[date], candidates: Sequence[tuple[int, int]], right_days: str, *, timezone: str
) -> list[date]:
    """The right partitions ``sweep_ds`` reads: the ds themselves ("same"), or every day the widest
    candidate reaches ("neighbours": :func:`neighbour_offsets`, the ``reference`` variant's days)."""
    if right_days not in ("same", "neighbours"):
        raise ValueError(f"right_days must be 'same' or 'neighbours', not {right_days!r}")
    offsets = [0] if right_days == "same" else neighbour_offsets(*widest(check_candidates(candidates)), timezone)
    return sorted({d + timedelta(days=o) for d in ds_list for o in offsets})


def sweep_ds(
    spark: SparkSession,
    spec: JoinSpec,
    ds_list: Sequence[date],
    candidates: Sequence[tuple[int, int]],
    s: Settings | None = None,
    *,
    right_days: str = "same",
) -> pd.DataFrame:
    """I/O shell: read the landed tables and :func:`sweep` the left partitions ``ds_list``.

    The caller decides the right partitions through ``right_days``: ``"same"`` reads right ds
    = each left ds (``batch_1d_windowed`` semantics); ``"neighbours"`` reads every day the widest
    candidate window reaches (the ``reference`` variant's days) (see :func:`right_read_days`), and those must
    have landed (checked against the landing log, like the batch joins). A ds without left
    events gets rows with ``left_events`` 0 and a NaN match rate.
    """
    from jobs.join.variants import missing_days
    from jobs.steps.batch import PartitionsNotLanded, landed_days
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    if not ds_list:
        raise ValueError("ds_list is empty: name at least one left partition")
    tables = Tables.of(spec, s)
    days = right_read_days(ds_list, candidates, right_days, timezone=spec.timezone)
    missing = missing_days(list(days), landed_days(spark, tables, "right"))
    if missing:  # the day-edge rule: the sweep would miss the late matches those days hold
        raise PartitionsNotLanded(f"the window sweep (--right-days {right_days})", max(ds_list), missing)
    land = f"joinshift land --ds {min(ds_list)}"
    left = delta_io.read_table(spark, tables.landed("left"), made_by=land).where(F.col("ds").isin(list(ds_list)))
    right = delta_io.read_table(spark, tables.landed("right"), made_by=land).where(F.col("ds").isin(days))
    out = sweep(left, right, spec, candidates, right_days=right_days)
    cands = check_candidates(candidates)
    have = set(out["ds"])
    fill = [(d, a, b, 0, 0, float("nan"), 0) for d in ds_list if d not in have for a, b in cands]
    if fill:
        out = pd.concat([out, pd.DataFrame(fill, columns=list(RESULT_COLUMNS))], ignore_index=True)
        out = out.sort_values(["ds", "lower_s", "upper_s"], ignore_index=True)
    return out
