"""The Hive-style daily batch join: the paper's three baselines (§7.1), one ds at a time.

* ``batch_1d_1d``       left ds ⋈ right ds, key equality only
* ``batch_1d_2d``       left ds ⋈ right ds and the neighbouring day(s) the window reaches into
                        (ds+1 for a positive upper bound, ds−1 for a negative lower bound), key only
* ``batch_1d_windowed`` left ds ⋈ right ds, restricted to the spec's window

The core (:func:`join_events`) is DataFrame in, DataFrame out, and the streaming join projects
its output through the same :func:`output_columns`, so every variant has one shape.

Run one ds::

    python -m jobs.batch_join --spec include/specs/search_sessions.yaml --ds 2026-11-20
"""

from __future__ import annotations

import argparse
import logging
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs import delta_io
from jobs.records import ARRIVAL_TIME, OFFSET, PARTITION
from jobs.settings import Settings
from jobs.spec import Cardinality, JoinSpec, JoinType, load_spec
from jobs.tables import BATCH_VARIANTS, Tables

log = logging.getLogger("joinshift.batch")


def col_name(side: str, column: str) -> str:
    """Output column of a side's column: ``left_event_time``, ``right_arrival_time``, ..."""
    return f"{side}_{column.lstrip('_')}"


def side_columns(spec: JoinSpec, side: str) -> list[str]:
    """The columns each side contributes to join output, before prefixing."""
    return [*spec.side(side).schema_, ARRIVAL_TIME, PARTITION, OFFSET]


def output_columns(spec: JoinSpec) -> list[str]:
    return ["ds", *(col_name("left", c) for c in side_columns(spec, "left")),
            *(col_name("right", c) for c in side_columns(spec, "right"))]


def prefixed(events: DataFrame, spec: JoinSpec, side: str) -> DataFrame:
    """A side's events with prefixed columns (left keeps ``ds``: output is partitioned by it)."""
    cols = [F.col(c).alias(col_name(side, c)) for c in side_columns(spec, side)]
    if side == "left":
        cols.append(F.col("ds"))
    return events.select(*cols)


def key_condition(spec: JoinSpec) -> Column:
    cond = F.lit(True)
    for lk, rk in zip(spec.left.key, spec.right.key):
        cond = cond & (F.col(col_name("left", lk)) == F.col(col_name("right", rk)))
    return cond


def window_condition(spec: JoinSpec) -> Column:
    """``right.t BETWEEN left.t + lower AND left.t + upper``, bounds inclusive (paper §3)."""
    lt = F.col(col_name("left", spec.left.event_time))
    rt = F.col(col_name("right", spec.right.event_time))
    lower = F.expr(f"INTERVAL {spec.window.lower_seconds} SECONDS")
    upper = F.expr(f"INTERVAL {spec.window.upper_seconds} SECONDS")
    return (rt >= lt + lower) & (rt <= lt + upper)


def first_arrived(pairs: DataFrame, spec: JoinSpec) -> DataFrame:
    """1-to-1: per left event, the matching right event that arrived first (then partition, offset)."""
    left_id = col_name("left", spec.left.id)
    order = Window.partitionBy(left_id).orderBy(
        F.col(col_name("right", ARRIVAL_TIME)).asc_nulls_last(),
        F.col(col_name("right", PARTITION)).asc_nulls_last(),
        F.col(col_name("right", OFFSET)).asc_nulls_last(),
    )
    return pairs.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def join_events(left: DataFrame, right: DataFrame, spec: JoinSpec, *, windowed: bool) -> DataFrame:
    """Join typed left and right events (landed-table shape) with the spec's join type and cardinality.

    Example::

        out = join_events(left_ds, right_ds, spec, windowed=True)   # batch_1d_windowed
    """
    cond = key_condition(spec)
    if windowed:
        cond = cond & window_condition(spec)
    how = "left" if spec.join.type == JoinType.left_outer else "inner"
    pairs = prefixed(left, spec, "left").join(prefixed(right, spec, "right"), cond, how)
    if spec.join.cardinality == Cardinality.one_to_one:
        pairs = first_arrived(pairs, spec)
    return pairs.select(*output_columns(spec))


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


def run_variant(spark: SparkSession, spec: JoinSpec, variant: str, ds: date,
                s: Settings | None = None) -> int:
    """I/O shell: read landed partitions, join, replace the output's ds partition. Returns rows written."""
    tables = Tables.of(spec, s)
    days = right_days(spec, variant, ds)
    missing = missing_days(days, landed_days(spark, tables, "right"))
    if missing:
        raise RuntimeError(
            f"{variant} for ds={ds} needs right-stream partitions {', '.join(map(str, missing))}, "
            "which have not landed yet; land them first"
        )
    left = delta_io.read_table(spark, tables.landed("left")).where(F.col("ds") == F.lit(ds))
    right = delta_io.read_table(spark, tables.landed("right")).where(F.col("ds").isin(days))
    out = join_events(left, right, spec, windowed=(variant == "batch_1d_windowed"))
    delta_io.replace_partitions(out, tables.output(variant), {"ds": [ds]})
    n = delta_io.read_table(spark, tables.output(variant)).where(F.col("ds") == F.lit(ds)).count()
    log.info("%s ds=%s: %d rows from right days %s", variant, ds, n, [str(d) for d in days])
    return n


def landed_days(spark: SparkSession, tables: Tables, side: str) -> list[date]:
    """Partitions the landing job has completed for a side (from the landing log)."""
    if not delta_io.table_exists(spark, tables.landing_log):
        return []
    rows = (spark.read.format("delta").load(tables.landing_log)
            .where(F.col("side") == side).select("ds").distinct().collect())
    return sorted(r.ds for r in rows)


def missing_days(needed: list[date], landed: list[date]) -> list[date]:
    """Needed partitions not landed yet. Days before the first landed day are history the
    pipeline never had: they count as landed (and empty), not as missing."""
    first = min(landed) if landed else None
    return [d for d in needed if d not in landed and (first is None or d >= first)]


def ready_variants(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> list[str]:
    """The variants whose right-stream partitions for ``ds`` have all landed."""
    landed = landed_days(spark, Tables.of(spec, s), "right")
    return [v for v in BATCH_VARIANTS if not missing_days(right_days(spec, v, ds), landed)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.batch_join", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", required=True, help="join spec YAML")
    p.add_argument("--ds", required=True, type=date.fromisoformat, help="left partition, YYYY-MM-DD")
    p.add_argument("--variant", choices=BATCH_VARIANTS, action="append",
                   help="run only this variant (repeatable); default: all three")
    args = p.parse_args(argv)
    from jobs.spark_session import get_spark

    spec = load_spec(args.spec)
    spark = get_spark("joinshift-batch-join")
    for v in args.variant or BATCH_VARIANTS:
        run_variant(spark, spec, v, args.ds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
