"""The Hive-style daily batch join: the paper's three baselines (§7.1) and the cut-off-free
``reference``, one ds at a time.

* ``batch_1d_1d``       left ds ⋈ right ds, key equality only
* ``batch_1d_2d``       left ds ⋈ right ds and the neighbouring day(s) the window reaches into
                        (ds+1 for a positive upper bound, ds−1 for a negative lower bound), key only
* ``batch_1d_windowed`` left ds ⋈ right ds, restricted to the spec's window
* ``reference``         left ds ⋈ every right ds the window reaches, restricted to the window
                        (see :mod:`jobs.join.variants`)

The core (:func:`jobs.join.conditions.join_events`) is DataFrame in, DataFrame out, and the
streaming join projects its output through the same columns, so every variant has one shape.

Run one ds::

    joinshift batch --ds 2026-11-20
"""

from __future__ import annotations

import logging
from datetime import date

from pyspark.sql import SparkSession

from jobs.join.columns import col_name, unique_columns
from jobs.join.conditions import join_events
from jobs.join.variants import DAILY_VARIANTS, is_windowed, missing_days, right_days
from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.storage import batch_input, delta_io
from jobs.storage.spark import join_conf
from jobs.storage.tables import Tables

log = logging.getLogger("joinshift.batch")


class PartitionsNotLanded(delta_io.MissingInput):
    """The day-edge rule: a variant whose right-stream days have not all landed is not computed
    for that ds (it would miss the late matches those days hold); it waits, marked incomplete."""

    def __init__(self, what: str, ds: date, missing: list[date]):
        self.ds, self.missing = ds, missing
        days = ", ".join(map(str, missing))
        super().__init__(
            f"{what} for ds {ds} waits for right-stream ds {days}, which has not landed: "
            f"land it (joinshift land --ds {missing[0]}{f' --to {missing[-1]}' if len(missing) > 1 else ''}) "
            "and run again"
        )


def run_variant(spark: SparkSession, spec: JoinSpec, variant: str, ds: date, s: Settings | None = None) -> int:
    """I/O shell: read landed partitions, join, replace the output's ds partition. Returns rows written.

    Nothing is written when an input has not landed: a later right day the window reaches waits
    (:class:`PartitionsNotLanded`, the day-edge rule); ds itself or an earlier day is missing input."""
    tables = Tables.of(spec, s)
    days = right_days(spec, variant, ds)
    landed = landed_sides(spark, tables)
    missing = missing_days(days, landed["right"])
    left_landed, early = ds in landed["left"], [d for d in missing if d <= ds]
    if not left_landed or early:
        first = min([ds, *early])
        what = (
            "left stream has" if not early else ("right stream has" if left_landed else "left and right streams have")
        )
        span = f"ds {first}" if first == ds else f"ds {first} .. {ds}"
        raise delta_io.MissingInput(
            f"{variant} for ds {ds}: the {what} not landed {span}: "
            f"run joinshift land --ds {first}{f' --to {ds}' if first != ds else ''} first"
        )
    if missing:
        raise PartitionsNotLanded(variant, ds, missing)
    land = f"joinshift land --ds {ds}"
    left = batch_input.read_side(spark, tables, "left", [ds], made_by=land)
    right = batch_input.read_side(spark, tables, "right", days, made_by=land)
    out = join_events(left, right, spec, windowed=is_windowed(variant))
    with join_conf(spark, tables.settings):
        n = delta_io.replace_partitions(out, tables.output(variant), {"ds": [ds]}, **output_layout(spec))
    log.info("%s ds=%s: %d rows from right days %s", variant, ds, n, [str(d) for d in days])
    return n


def output_layout(spec: JoinSpec) -> dict[str, list[str]]:
    """How a join output table is written: file statistics on the left event time only (what a
    reader narrows by, beside the ds partition; min/max of unique ids skip nothing, and computing
    Delta's default 32 columns' was a fifth of a 1 M-event join's write); and each side's values
    (nearly) unique per event (its id, event time, arrival time and Kafka offset) without a Parquet
    dictionary, which the writer builds for each file only to drop it (the join at 10 M left
    events 0.87x the time). BENCHMARKS.md, "Unique columns without a dictionary", has the numbers."""
    unique = [c for side in ("left", "right") for c in unique_columns(spec, side)]
    return {"stats_columns": [col_name("left", spec.left.event_time)], "plain_columns": unique}


def landed_days(spark: SparkSession, tables: Tables, side: str) -> list[date]:
    """The days a side's batch input holds: its own table's (``batch_table``), or the partitions
    the landing job has completed (from the landing log)."""
    return landed_sides(spark, tables, (side,))[side]


def landed_sides(
    spark: SparkSession, tables: Tables, sides: tuple[str, ...] = ("left", "right")
) -> dict[str, list[date]]:
    """:func:`landed_days` of several sides, the landing log read once: it holds a row per side and
    ds, so its rows are collected as they are (a read takes two Spark jobs, where one side's
    ``distinct`` took three)."""
    days: dict[str, list[date]] = {}
    for side in sides:
        own = batch_input.own_table_days(spark, tables, side)
        if own is not None:
            days[side] = own
    logged = [side for side in sides if side not in days]
    if logged:
        rows = []
        if delta_io.table_exists(spark, tables.landing_log):
            rows = spark.read.format("delta").load(tables.landing_log).select("side", "ds").collect()
        for side in logged:
            days[side] = sorted({r.ds for r in rows if r.side == side})
    return days


def waiting_variants(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> dict[str, list[date]]:
    """The daily variants that cannot be computed for ``ds`` yet, each with the later right days it
    waits for (the day-edge rule). Nothing waits when no landing is on record (tables written by
    other means): compare then takes what exists, as it always did."""
    landed = landed_days(spark, Tables.of(spec, s), "right")
    if not landed:
        return {}
    waits = {v: [d for d in missing_days(right_days(spec, v, ds), landed) if d > ds] for v in DAILY_VARIANTS}
    return {v: days for v, days in waits.items() if days}


def ready_variants(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> list[str]:
    """The daily variants whose right-stream partitions for ``ds`` have all landed (none before
    any landing is on record)."""
    landed = landed_days(spark, Tables.of(spec, s), "right")
    return [v for v in DAILY_VARIANTS if not missing_days(right_days(spec, v, ds), landed)]
