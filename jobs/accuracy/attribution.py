"""Why the stream missed what the batch found: which records the watermark dropped, and when.

Spark's stream-stream join drops an input row whose event time is at or behind the watermark in
force for the micro-batch that reads it (``numRowsDroppedByWatermark``). The progress log
(``ProgressRecorder``) has, per micro-batch, the watermark and the Kafka offset range read from
every partition. Joined with the landed tables (which carry each record's partition and offset),
that tells for every record the micro-batch that read it and whether the watermark dropped it.
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION
from jobs.spec import JoinSpec
from jobs.steps.replay_live import ARRIVALS_KEY  # a replay-as-live batch's record-time range


def _ms(ts: str | None) -> int | None:
    if not ts:
        return None
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def batch_offset_ranges(progress: list[dict]) -> list[tuple[int, str, int, int, int, int]]:
    """(batch_id, topic, partition, start_offset, end_offset, watermark_ms) per micro-batch.

    A re-run micro-batch (after a crash) reads the same offsets with the same watermark, so the
    last report of each batch id wins.
    """
    latest: dict[int, dict] = {}
    for p in progress:
        latest[p["batchId"]] = p
    rows = []
    for batch_id, p in sorted(latest.items()):
        wm = _ms((p.get("eventTime") or {}).get("watermark")) or 0
        for src in p.get("sources", []):
            end = _parse_offsets(src.get("endOffset"))
            start = _parse_offsets(src.get("startOffset"))
            for topic, parts in end.items():
                for part, end_off in parts.items():
                    start_off = start.get(topic, {}).get(part, 0)
                    if end_off > start_off:
                        rows.append((batch_id, topic, int(part), int(start_off), int(end_off), wm))
    return rows


def _parse_offsets(value) -> dict[str, dict[str, int]]:
    import json

    if not value:
        return {}
    if isinstance(value, str):
        value = json.loads(value)
    return {t: {str(k): int(v) for k, v in parts.items()} for t, parts in value.items()}


def _with_slice_watermark(
    spark: SparkSession, landed: DataFrame, progress: list[dict], event_time: str, policy: str
) -> DataFrame:
    """:func:`with_processing_watermark` for a replay-as-live run: a record's micro-batch is the
    one whose slice of record time holds its arrival time."""
    latest = {p["batchId"]: p for p in progress}
    wm_of = {b: _ms((p.get("eventTime") or {}).get("watermark")) or 0 for b, p in latest.items()}
    rows = [
        (
            b,
            p[ARRIVALS_KEY]["start_ms"],
            p[ARRIVALS_KEY]["end_ms"],
            wm_of[b] if policy == "current" else wm_of.get(b - 1, 0),
        )
        for b, p in sorted(latest.items())
        if ARRIVALS_KEY in p
    ]
    rdf = spark.createDataFrame(rows, "_batch_id long, _start long, _end long, _watermark_ms long")
    arrival = F.unix_millis(F.col(ARRIVAL_TIME))
    out = landed.join(F.broadcast(rdf), (arrival >= F.col("_start")) & (arrival < F.col("_end")), "left")
    et_ms = F.unix_millis(F.col(event_time))
    return out.select(
        *landed.columns,
        "_batch_id",
        F.timestamp_millis("_watermark_ms").alias("_watermark"),
        F.coalesce((F.col("_watermark_ms") > 0) & (et_ms <= F.col("_watermark_ms")), F.lit(False)).alias(
            "_dropped_late"
        ),
    )


#: Which watermark filters late rows in a micro-batch: the one the batch reports ("current"), or
#: the previous batch's ("previous": Spark's watermark for late events when stateful operators
#: are chained). Both are offered because the product must explain either.
WATERMARK_POLICIES = ("current", "previous")


def with_processing_watermark(
    spark: SparkSession, landed: DataFrame, topic: str, progress: list[dict], event_time: str, policy: str = "current"
) -> DataFrame:
    """Landed rows of ``topic`` + ``_batch_id``, ``_watermark`` and ``_dropped_late``.

    Rows the stream has not read yet get null ``_batch_id`` and ``_dropped_late`` false.
    """
    if policy not in WATERMARK_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(WATERMARK_POLICIES)}, not {policy!r}")
    if any(ARRIVALS_KEY in p for p in progress):
        return _with_slice_watermark(spark, landed, progress, event_time, policy)
    ranges = [r for r in batch_offset_ranges(progress) if r[1] == topic]
    if policy == "previous":
        wm_of = {}
        for p in progress:
            wm_of[p["batchId"]] = _ms((p.get("eventTime") or {}).get("watermark")) or 0
        ranges = [(b, t, part, st, en, wm_of.get(b - 1, 0)) for b, t, part, st, en, _ in ranges]
    schema = "_batch_id long, _topic string, _p int, _start long, _end long, _watermark_ms long"
    rdf = spark.createDataFrame(ranges, schema)
    cond = (F.col(PARTITION) == F.col("_p")) & (F.col(OFFSET) >= F.col("_start")) & (F.col(OFFSET) < F.col("_end"))
    out = landed.join(F.broadcast(rdf), cond, "left")
    et_ms = F.unix_millis(F.col(event_time))
    return out.select(
        *landed.columns,
        "_batch_id",
        F.timestamp_millis("_watermark_ms").alias("_watermark"),
        F.coalesce((F.col("_watermark_ms") > 0) & (et_ms <= F.col("_watermark_ms")), F.lit(False)).alias(
            "_dropped_late"
        ),
    )


def stream_view(
    spark: SparkSession,
    spec: JoinSpec,
    left: DataFrame,
    right: DataFrame,
    progress: list[dict],
    policy: str = "current",
) -> tuple[DataFrame, DataFrame]:
    """Both sides' landed rows annotated with what the streaming join did with them."""
    return (
        with_processing_watermark(spark, left, spec.left.topic, progress, spec.left.event_time, policy),
        with_processing_watermark(spark, right, spec.right.topic, progress, spec.right.event_time, policy),
    )


#: Why a left event the baseline matched has no stream match, checked in this order.
CAUSES = ("left_late", "late_right", "outside_window", "not_yet_processed", "other")


def attribute_misses(
    spark: SparkSession, spec: JoinSpec, ds, *, baseline: str | None = None, s=None, samples: int = 10
) -> dict:
    """Per ds: every left event the baseline matched and the stream did not, by cause; and the
    reverse, what the stream matched that ``batch_1d_1d`` missed (the midnight cut-off gain).

    Causes: ``left_late`` (the left event itself was behind the watermark), ``late_right`` (every
    right event in its window arrived after the watermark passed it), ``outside_window`` (the
    baseline's matches all lie outside the stream's window), ``not_yet_processed`` (the stream has
    not read them yet), ``other``. Quarantined records are missed by batch and stream alike and
    are counted apart.
    """
    from datetime import timedelta

    from jobs.storage import delta_io
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    baseline = baseline or spec.accuracy.baseline
    left_id, right_id = f"left_{spec.left.id}", f"right_{spec.right.id}"
    progress = read_progress(tables.progress_log(JOIN_QUERY))
    landed_l = delta_io.read_table(spark, tables.landed("left")).where(F.col("ds") == F.lit(ds))
    landed_r = delta_io.read_table(spark, tables.landed("right")).where(
        F.col("ds").between(F.lit(ds - timedelta(days=1)), F.lit(ds + timedelta(days=1)))
    )
    left, right = stream_view(spark, spec, landed_l, landed_r, progress)

    def matched(variant: str) -> DataFrame:
        out = delta_io.read_table(spark, tables.output(variant)).where(F.col("ds") == F.lit(ds))
        return out.where(F.col(right_id).isNotNull()).select(F.col(left_id).alias("_lid")).distinct()

    stream_m, base_m = matched("stream"), matched(baseline)
    missed = base_m.join(stream_m, "_lid", "left_anti")
    missed_left = left.join(missed, left[spec.left.id] == missed["_lid"]).drop("_lid")
    # the stream's window candidates of each missed left, with what the stream did with them
    from jobs.join.columns import col_name
    from jobs.join.conditions import key_condition, window_condition

    lcols = [F.col(c).alias(col_name("left", c)) for c in [*spec.left.schema_, "_dropped_late"]]
    rcols = [F.col(c).alias(col_name("right", c)) for c in [*spec.right.schema_, "_batch_id", "_dropped_late"]]
    cand = missed_left.select(*lcols).join(right.select(*rcols), key_condition(spec) & window_condition(spec), "left")
    per_left = cand.groupBy(left_id, col_name("left", spec.left.event_time), "left_dropped_late").agg(
        F.count(right_id).alias("n"),
        F.sum(F.when(F.col("right_dropped_late"), 1).otherwise(0)).alias("n_late"),
        F.sum(F.when(F.col("right_batch_id").isNull() & F.col(right_id).isNotNull(), 1).otherwise(0)).alias("n_unread"),
    )
    cause = (
        F.when(F.col("left_dropped_late"), "left_late")
        .when(F.col("n") == 0, "outside_window")
        .when(F.col("n_late") == F.col("n"), "late_right")
        .when(F.col("n_unread") > 0, "not_yet_processed")
        .otherwise("other")
    )
    hour = F.hour(F.from_utc_timestamp(F.col(col_name("left", spec.left.event_time)), spec.timezone))
    classified = per_left.select(F.col(left_id).alias("event_id"), cause.alias("cause"), hour.alias("hour")).cache()
    rows = classified.collect()
    classified.unpersist()

    gain = (
        stream_m.join(matched("batch_1d_1d"), "_lid", "left_anti")
        if delta_io.table_exists(spark, tables.output("batch_1d_1d"))
        else None
    )
    gain_ids = [r._lid for r in gain.collect()] if gain is not None else []
    quarantined = {}
    if delta_io.table_exists(spark, tables.quarantine):
        quarantined = {
            r["stream"]: r["n"]
            for r in spark.read.format("delta")
            .load(tables.quarantine)
            .where((F.col("ds") == F.lit(ds)) & (F.col("stage") == "landing"))
            .groupBy("stream")
            .agg(F.count("*").alias("n"))
            .collect()
        }

    counts = {c: 0 for c in CAUSES}
    by_hour = {h: {c: 0 for c in CAUSES} for h in range(24)}
    sample_ids: dict[str, list[str]] = {c: [] for c in CAUSES}
    for r in rows:
        counts[r.cause] += 1
        by_hour[r.hour][r.cause] += 1
        if len(sample_ids[r.cause]) < samples:
            sample_ids[r.cause].append(r.event_id)
    return {
        "ds": str(ds),
        "baseline": baseline,
        "missed_by_stream": len(rows),
        "counts": {**counts, "midnight_gain": len(gain_ids)},
        "by_hour": [{"hour": h, **by_hour[h]} for h in range(24)],
        "samples": {**{c: ids for c, ids in sample_ids.items() if ids}, "midnight_gain": sorted(gain_ids)[:samples]},
        "quarantined": quarantined,
    }
