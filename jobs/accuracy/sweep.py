"""One-pass window sweep: the match rate of many candidate windows for the cost of about one join.

Paper §6.5 / §7.2: choosing the window ``[lower, upper]`` trades match rate against state size
and latency. Instead of running the windowed batch join once per candidate, :func:`sweep` joins
the left and right events once, with the *widest* candidate window, and keeps per left event
just enough to decide every narrower window:

1. one join, key equality and ``right.t − left.t ∈ [min lower, max upper]`` (left outer, so
   left events without any pair are still counted: they are unmatched for every candidate);
2. per pair the offset ``d = right.t − left.t`` (exact, in microseconds) and its *cell*: the
   sorted distinct bounds ``p_0 < … < p_{n−1}`` of all candidates cut the widest window into
   ``2n − 1`` cells (each point ``p_x`` is cell ``2x``, the open gap after it cell ``2x + 1``);
   ONE aggregation per left event ORs the cell bits of its pairs into a bit set (one long per
   63 cells). A left event matches ``[p_x, p_y]`` iff some ``d`` has ``p_x <= d <= p_y``, i.e. iff
   a bit of cells ``2x..2y`` is set (min/max of ``d`` alone would not do: offsets {−5h, +5h}
   match [−6h, +6h], not [−1h, +1h]). The same aggregation counts pairs below / up to each point;
3. ONE aggregation per (ds, bit set): left events and their pair counts per distinct cell set
   (few rows: left events share few cell sets), collected; then numpy decides every candidate:
   matched = left events whose bits meet ``cells(a, b)``, pairs in the window
   ``= #(d <= b) − #(d < a)``.

So the cost is one join plus two aggregations whatever the number of candidates (K does not even
enter the Spark plan, only the number of distinct bounds does): the left side is hash-partitioned
by the join key once, the join output keeps that partitioning (broadcast or sort-merge), and the
first aggregation groups by the key too, so it needs no further shuffle; the second one shuffles
a few small rows.

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
                      .. ``D + ceil(upper / 1d)`` (:func:`jobs.join.variants.window_day_offsets`):
                      the ``reference`` variant's read set, restricted to the window -- what a
                      stream sees across midnight (for a window within a day: ``D−1`` if the
                      lower bound is negative, ``D``, ``D+1`` if the upper bound is positive).

The spec's ``join.predicate``, if any, is part of the one join (:func:`jobs.join.conditions.match_condition`).

Candidate grids, in code or in the compact form (``start..end/step`` ranges, single values, or
values joined by ``|``; units ms/s/m/h/d, compound like ``-4h30m``; a bare ``0`` is allowed)::

    candidate_grid(range(-21600, 1, 1800), range(0, 21601, 1800))     # 13 × 13 = 169
    parse_grid("lower=-6h..0h/30m,upper=0..6h/30m")                    # the same
    parse_grid("lower=-3h|-1h,upper=30m")                              # [(-10800, 1800), (-3600, 1800)]

Command line (reads the landed tables; prints one line per ds × candidate)::

    joinshift sweep --ds 2026-11-20 \\
        --grid "lower=-6h..0/30m,upper=0..6h/30m" [--right-days same|neighbours]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, timedelta
from functools import reduce
from math import gcd

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.columns import col_name
from jobs.join.conditions import match_condition, predicate_columns
from jobs.join.variants import window_day_offsets
from jobs.settings import Settings
from jobs.spec import JoinSpec, format_duration
from jobs.spec.duration import duration_seconds

#: Columns of :func:`sweep`'s result, one row per ds × candidate.
RESULT_COLUMNS = ("ds", "lower_s", "upper_s", "left_events", "matched_left", "match_rate", "pairs")
RIGHT_DAYS = ("all", "same", "neighbours")

_US = 1_000_000


class GridError(ValueError):
    """A candidate grid is invalid; the message names the bad part."""


# ------------------------------------------------------------------------------- candidates


def _seconds(value: object, what: str) -> int:
    """Whole seconds of an int, a timedelta or a duration text (``-3h``, ``-4h30m``, ``0``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, timedelta)):
        raise GridError(f"{what}: {value!r} is not a duration")
    try:
        secs = duration_seconds(value)
    except ValueError:
        raise GridError(
            f"{what}: {value!r} is not a duration; write a signed number with a unit (ms, s, m, h, d), "
            "e.g. -6h, 30m, -4h30m, or a bare 0"
        ) from None
    if secs != int(secs):
        raise GridError(f"{what}: {value!r} is not a whole number of seconds")
    return int(secs)


def candidate_grid(lowers: Iterable[object], uppers: Iterable[object]) -> list[tuple[int, int]]:
    """Every ``(lower_s, upper_s)`` with ``lower <= upper``, sorted; bounds as ints (seconds),
    timedeltas or duration texts. Pairs with ``lower > upper`` are not windows and are skipped."""
    lo = sorted({_seconds(v, "lower") for v in lowers})
    up = sorted({_seconds(v, "upper") for v in uppers})
    if not lo or not up:
        raise GridError("a grid needs at least one lower and one upper bound")
    grid = [(a, b) for a in lo for b in up if a <= b]
    if not grid:
        raise GridError(f"no candidate has lower <= upper (lowers {lo[0]}..{lo[-1]} s, uppers {up[0]}..{up[-1]} s)")
    return grid


def _values(name: str, text: str, part: str) -> list[int]:
    out: list[int] = []
    for item in text.split("|"):
        item = item.strip()
        where = f"grid part {part!r}"
        if not item:
            raise GridError(f"{where}: empty value")
        if ".." not in item:
            out.append(_seconds(item, where))
            continue
        rng, _, step_text = item.partition("/")
        start_text, _, end_text = rng.partition("..")
        start, end = _seconds(start_text, where), _seconds(end_text, where)
        if start > end:
            raise GridError(f"{where}: range {item!r} runs backwards ({start_text.strip()} > {end_text.strip()})")
        if start == end:
            out.append(start)
            continue
        if not step_text.strip():
            raise GridError(f"{where}: range {item!r} needs a step, e.g. {rng}/30m")
        step = _seconds(step_text, where)
        if step <= 0:
            raise GridError(f"{where}: the step {step_text.strip()!r} must be positive")
        if (end - start) % step:
            raise GridError(
                f"{where}: the step {step_text.strip()} does not divide the range "
                f"{start_text.strip()}..{end_text.strip()}"
            )
        out.extend(range(start, end + 1, step))
    return out


def parse_grid(text: str) -> list[tuple[int, int]]:
    """``"lower=-6h..0h/30m,upper=0..6h/30m"`` -> :func:`candidate_grid` of both bound lists."""
    bounds: dict[str, list[int]] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise GridError(f"grid {text!r}: empty part (two commas in a row, or a trailing comma?)")
        name, eq, values = part.partition("=")
        name = name.strip()
        if not eq or name not in ("lower", "upper"):
            raise GridError(
                f"grid part {part!r}: write lower=<values> or upper=<values> (values: -6h..0h/30m, -3h, or -3h|-1h)"
            )
        if name in bounds:
            raise GridError(f"grid part {part!r}: {name} is given twice")
        bounds[name] = _values(name, values, part)
    for name in ("lower", "upper"):
        if name not in bounds:
            raise GridError(f"grid {text!r}: missing {name}=..., e.g. lower=-6h..0h/30m,upper=0..6h/30m")
    return candidate_grid(bounds["lower"], bounds["upper"])


def format_candidate(lower_s: int, upper_s: int) -> str:
    return f"[{format_duration(timedelta(seconds=lower_s), True)}, {format_duration(timedelta(seconds=upper_s), True)}]"


# ------------------------------------------------------------------------------- the sweep


def _check_candidates(candidates: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    if not candidates:
        raise GridError("no candidate windows to sweep")
    out = []
    for c in candidates:
        a, b = _seconds(c[0], "lower"), _seconds(c[1], "upper")
        if a > b:
            raise GridError(f"candidate {format_candidate(a, b)}: lower is after upper")
        out.append((a, b))
    return list(dict.fromkeys(out))


def widest(candidates: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """The window every candidate lies in: (min lower, max upper)."""
    return min(a for a, _ in candidates), max(b for _, b in candidates)


def neighbour_offsets(lower_s: int, upper_s: int) -> list[int]:
    """Right ds offsets (days) a left ds reads under ``right_days="neighbours"``: every day the
    window reaches, the same rule as the ``reference`` variant."""
    return window_day_offsets(lower_s, upper_s)


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


def sweep_cells(
    left: DataFrame, right: DataFrame, spec: JoinSpec, candidates: Sequence[tuple[int, int]], *, right_days: str = "all"
) -> DataFrame:
    """The lazy Spark part of :func:`sweep`: left events counted per ds and *cell set*.

    The bound points ``p_0 < … < p_{n−1}`` (sorted distinct bounds of all candidates) cut
    ``[min lower, max upper]`` into ``2n − 1`` cells: point ``p_x`` is cell ``2x``, the open gap
    after it cell ``2x + 1``. Per left event ONE bit set of the cells its offsets fall in
    (``_mask0``, ``_mask1``, …: 63 cells per long; 0 for a left event without a pair); it matches
    ``[p_x, p_y]`` iff one of the bits ``2x..2y`` is set. Rows: ``ds``, the masks, ``_n`` (left
    events with that cell set), ``_lt<x>`` / ``_le<x>`` (their pairs with ``d`` below lower point
    ``x`` / up to upper point ``x``). Few rows: left events share few distinct cell sets.
    """
    if right_days not in RIGHT_DAYS:
        raise ValueError(f"right_days must be one of {', '.join(RIGHT_DAYS)}, not {right_days!r}")
    cl = _Cells(_check_candidates(candidates))
    lt, rt = col_name("left", spec.left.event_time), col_name("right", spec.right.event_time)
    lkeys = [col_name("left", k) for k in spec.left.key]
    # a left event is a left row: a row id, so nothing depends on event ids being unique
    l_df = left.select(
        *[F.col(k).alias(col_name("left", k)) for k in spec.left.key],
        *[
            F.col(c).alias(col_name("left", c))
            for c in predicate_columns(spec, "left")
            if c not in (*spec.left.key, spec.left.event_time)
        ],
        F.col(spec.left.event_time).alias(lt),
        F.col("ds"),
        F.monotonically_increasing_id().alias("_lid"),
    )
    r_df = right.select(
        *[F.col(k).alias(col_name("right", k)) for k in spec.right.key],
        *[
            F.col(c).alias(col_name("right", c))
            for c in predicate_columns(spec, "right")
            if c not in (*spec.right.key, spec.right.event_time)
        ],
        F.col(spec.right.event_time).alias(rt),
        F.col("ds").alias("_right_ds"),
    )

    cond = match_condition(spec.with_window(timedelta(seconds=cl.lo), timedelta(seconds=cl.hi)))
    if right_days == "same":
        cond = cond & (F.col("_right_ds") == F.col("ds"))
    elif right_days == "neighbours":
        cond = cond & F.datediff(F.col("_right_ds"), F.col("ds")).isin(neighbour_offsets(cl.lo, cl.hi))
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


def sweep(
    left: DataFrame, right: DataFrame, spec: JoinSpec, candidates: Sequence[tuple[int, int]], *, right_days: str = "all"
) -> pd.DataFrame:
    """Match rate (and pairs) per ds × candidate window, from landed-shape left/right events.

    One Spark job (1 join + 2 aggregations, see :func:`sweep_cells`), then every candidate is
    decided on the collected cell sets with numpy. Returns a pandas frame with
    :data:`RESULT_COLUMNS`, sorted by ds, lower_s, upper_s; ``ds`` is the left's ds.

    Example::

        rates = sweep(left_ds, right_ds, spec, parse_grid("lower=-6h..0/30m,upper=0..6h/30m"),
                      right_days="same")
    """
    cands = _check_candidates(candidates)
    cl = _Cells(cands)
    rows = sweep_cells(left, right, spec, cands, right_days=right_days).collect()
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
            m = int(matched[k])
            out.append((ds, a, b, total, m, m / total if total else float("nan"), pairs))
    res = pd.DataFrame(out, columns=list(RESULT_COLUMNS))
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


def right_read_days(ds_list: Sequence[date], candidates: Sequence[tuple[int, int]], right_days: str) -> list[date]:
    """The right partitions ``sweep_ds`` reads: the ds themselves ("same"), or every day the widest
    candidate reaches ("neighbours": :func:`neighbour_offsets`, the ``reference`` variant's days)."""
    if right_days not in ("same", "neighbours"):
        raise ValueError(f"right_days must be 'same' or 'neighbours', not {right_days!r}")
    offsets = [0] if right_days == "same" else neighbour_offsets(*widest(_check_candidates(candidates)))
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
    days = right_read_days(ds_list, candidates, right_days)
    missing = missing_days(list(days), landed_days(spark, tables, "right"))
    if missing:  # the day-edge rule: the sweep would miss the late matches those days hold
        raise PartitionsNotLanded(f"the window sweep (--right-days {right_days})", max(ds_list), missing)
    land = f"joinshift land --ds {min(ds_list)}"
    left = delta_io.read_table(spark, tables.landed("left"), made_by=land).where(F.col("ds").isin(list(ds_list)))
    right = delta_io.read_table(spark, tables.landed("right"), made_by=land).where(F.col("ds").isin(days))
    out = sweep(left, right, spec, candidates, right_days=right_days)
    cands = _check_candidates(candidates)
    have = set(out["ds"])
    fill = [(d, a, b, 0, 0, float("nan"), 0) for d in ds_list if d not in have for a, b in cands]
    if fill:
        out = pd.concat([out, pd.DataFrame(fill, columns=list(RESULT_COLUMNS))], ignore_index=True)
        out = out.sort_values(["ds", "lower_s", "upper_s"], ignore_index=True)
    return out
