"""The join's semantics, shared by every variant: key and window conditions, the spec's extra
predicate, first-arrived (1-to-1), and the two cores (batch and stream), pure DataFrame -> DataFrame.

``l.key = r.key AND r.t BETWEEN l.t + lower AND l.t + upper [AND predicate]``, bounds inclusive
(paper §3). :func:`match_condition` is THE match condition: batch, stream, sweep and miss
attribution all join with it, so a spec change reaches every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, col_name, output_columns, prefixed
from jobs.spec import PREDICATE_TOKEN, Cardinality, JoinSpec, JoinType, SpecError, predicate_refs


def key_condition(spec: JoinSpec) -> Column:
    pairs = [
        F.col(col_name("left", lk)) == F.col(col_name("right", rk)) for lk, rk in zip(spec.left.key, spec.right.key)
    ]
    cond = pairs[0]
    for c in pairs[1:]:
        cond = cond & c
    return cond


def window_condition(spec: JoinSpec, *, stream: bool = False) -> Column:
    """``right.t BETWEEN left.t + lower AND left.t + upper``, bounds inclusive (paper §3).

    A stream's condition adds intervals to the time columns: the form Spark reads a stream-stream
    join's state eviction from. Everywhere else the same test compares microseconds since the epoch:
    Spark adds a day-time interval to a timestamp through a ``ZonedDateTime``, twice a candidate
    pair: 6 % of a 10 M-event batch join's task samples in a profile (BENCHMARKS.md, "The window's
    bounds in microseconds"). Both are exact."""
    lt = F.col(col_name("left", spec.left.event_time))
    rt = F.col(col_name("right", spec.right.event_time))
    if stream:
        lower = F.expr(f"INTERVAL {spec.window.lower_seconds} SECONDS")
        upper = F.expr(f"INTERVAL {spec.window.upper_seconds} SECONDS")
        return (rt >= lt + lower) & (rt <= lt + upper)
    lt_us, rt_us = F.unix_micros(lt), F.unix_micros(rt)
    return (rt_us >= lt_us + F.lit(spec.window.lower_seconds * 1_000_000)) & (
        rt_us <= lt_us + F.lit(spec.window.upper_seconds * 1_000_000)
    )


def predicate_sql(spec: JoinSpec) -> str | None:
    """The spec's ``join.predicate`` on the prefixed output columns (``l.x`` -> ``left_x``), or None."""
    if spec.join.predicate is None:
        return None

    def column(m) -> str:
        if not m.group(1):
            return m.group(0)  # a quoted literal stays as written
        return f"`{col_name('left' if m.group(1) == 'l' else 'right', m.group(2))}`"

    return PREDICATE_TOKEN.sub(column, spec.join.predicate)


def predicate_columns(spec: JoinSpec, side: str) -> list[str]:
    """The side's schema columns the predicate names (what a join must carry besides key and time)."""
    if spec.join.predicate is None:
        return []
    return [c for s, c in predicate_refs(spec.join.predicate) if s == side]


def match_condition(spec: JoinSpec, *, windowed: bool = True, stream: bool = False) -> Column:
    """When a left and a right event (prefixed columns) match: key AND window (unless
    ``windowed=False``, the key-only baselines) AND the spec's predicate, if any; ``stream=True``
    for a stream-stream join (:func:`window_condition`).

    Example::

        pairs = left.join(right, match_condition(spec), "left")
    """
    cond = key_condition(spec)
    if windowed:
        cond = cond & window_condition(spec, stream=stream)
    extra = predicate_sql(spec)
    if extra is not None:
        _check_parses(extra, spec)
        cond = cond & F.expr(extra)
    return cond


def _check_parses(sql: str, spec: JoinSpec) -> None:
    """A predicate Spark cannot parse is the spec's mistake: one line naming the field, not a JVM
    trace from deep inside a join (``F.expr`` parses lazily; a projection parses at once)."""
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        return
    try:
        spark.range(0).selectExpr(sql)
    except ParseException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"join.predicate: {spec.join.predicate!r} is not a Spark SQL expression ({first})") from None
    except AnalysisException:
        pass  # parsed; its columns resolve in the join, not on this empty projection


def first_arrived(pairs: DataFrame, spec: JoinSpec) -> DataFrame:
    """1-to-1: per left event, the matching right event that arrived first (then partition, offset;
    a batch table of your own without an arrival time: the earliest event time, then the id)."""
    left_id = col_name("left", spec.left.id)
    order = Window.partitionBy(left_id).orderBy(
        F.col(col_name("right", ARRIVAL_TIME)).asc_nulls_last(),
        F.col(col_name("right", PARTITION)).asc_nulls_last(),
        F.col(col_name("right", OFFSET)).asc_nulls_last(),
        F.col(col_name("right", spec.right.event_time)).asc_nulls_last(),
        F.col(col_name("right", spec.right.id)).asc_nulls_last(),
    )
    return pairs.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def join_events(left: DataFrame, right: DataFrame, spec: JoinSpec, *, windowed: bool) -> DataFrame:
    """Join typed left and right events (landed-table shape) with the spec's join type and cardinality.

    Example::

        out = join_events(left_ds, right_ds, spec, windowed=True)   # batch_1d_windowed
    """
    cond = match_condition(spec, windowed=windowed)
    how = "left" if spec.join.type == JoinType.left_outer else "inner"
    pairs = prefixed(left, spec, "left").join(prefixed(right, spec, "right"), cond, how)
    if spec.join.cardinality == Cardinality.one_to_one:
        pairs = first_arrived(pairs, spec)
    return pairs.select(*output_columns(spec))


@dataclass(frozen=True)
class Handover:
    """Which left events a replay's new run owns (writes the rows of): those that arrived from
    ``cutover`` on; those the old run never read, at or past the Kafka offsets its checkpoint had
    committed (``read_to``, per partition; a partition missing from it, all of it); and those whose
    window the old run still held open when it stopped: event time after ``open_from`` (its last
    watermark less the window's upper bound; Spark evicts a left row, writing its non-match, once
    its event time is at or behind that). The old run owns the rest, rows it wrote or will never
    write again alike. Without ``read_to`` (no old checkpoint, or one that cannot be read), by
    arrival alone. By arrival alone, a left event that arrived before the cut-over after the old
    run's last micro-batch, or one whose window it held open, got no rows from anybody."""

    cutover: datetime
    read_to: dict[int, int] | None = field(default=None)
    open_from: datetime | None = None

    def owns(self, spec: JoinSpec) -> Column:
        """Whether the new run owns a row (joined or not), from its left event's arrival time,
        partition, offset and event time (the prefixed columns: ``left_arrival_time``, ...).

        ``isnull(c) OR``: no such column is null, but a bare ``c >= t`` makes Spark infer
        ``isnotnull(c)`` and store the column as non-nullable in the join's state, whose schema the
        live run (nullable, no such filter) then fails to restart from (STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE)."""
        arrival, partition, offset = (F.col(col_name("left", c)) for c in (ARRIVAL_TIME, PARTITION, OFFSET))
        owned = arrival.isNull() | (arrival >= F.lit(self.cutover))
        if self.read_to is None:
            return owned
        unread_from: Column = F.lit(0)  # a partition the old run did not know: it read none of it
        for p, o in sorted(self.read_to.items()):
            unread_from = F.when(partition == F.lit(p), F.lit(o)).otherwise(unread_from)
        owned = owned | partition.isNull() | offset.isNull() | (offset >= unread_from)
        if self.open_from is not None:
            et = F.col(col_name("left", spec.left.event_time))
            owned = owned | et.isNull() | (et > F.lit(self.open_from))
        return owned


def join_streams(left: DataFrame, right: DataFrame, spec: JoinSpec, *, left_from: Handover | None = None) -> DataFrame:
    """Typed left/right event streams -> output rows (same columns as the batch variants).

    ``left_from`` (a replay's :class:`Handover`): the left events the old run owns have their rows
    written by it, not here. They still pass the watermark and the de-duplication, as in a live
    run, but stay out of the join: no state, no pairs to compute and throw away.

    Works on batch DataFrames too (the watermark is then a no-op), which is how tests pin it down.
    """
    lt, rt = col_name("left", spec.left.event_time), col_name("right", spec.right.event_time)
    lw = (
        prefixed(left, spec, "left")
        .withWatermark(lt, f"{spec.left.watermark_seconds} seconds")
        .dropDuplicatesWithinWatermark([col_name("left", spec.left.id)])
    )
    if left_from is not None:
        lw = lw.where(left_from.owns(spec))
    rw = (
        prefixed(right, spec, "right")
        .withWatermark(rt, f"{spec.right.watermark_seconds} seconds")
        .dropDuplicatesWithinWatermark([col_name("right", spec.right.id)])
    )
    how = "left_outer" if spec.join.type == JoinType.left_outer else "inner"
    return lw.join(rw, match_condition(spec, stream=True), how).select(*output_columns(spec))


def output_keys(spec: JoinSpec) -> list[str]:
    """What makes an output row unique: the pair, or the left event alone for 1-to-1."""
    left_id = col_name("left", spec.left.id)
    if spec.join.cardinality == Cardinality.one_to_one:
        return [left_id]
    return [left_id, col_name("right", spec.right.id)]


def select_batch_rows(batch: DataFrame, spec: JoinSpec) -> DataFrame:
    """Within one micro-batch, 1-to-1 keeps each left event's first-arrived match."""
    if spec.join.cardinality == Cardinality.one_to_one:
        return first_arrived(batch, spec)
    return batch
