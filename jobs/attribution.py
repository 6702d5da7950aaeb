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

from jobs.records import OFFSET, PARTITION
from jobs.spec import JoinSpec


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


def with_processing_watermark(spark: SparkSession, landed: DataFrame, topic: str, progress: list[dict],
                              event_time: str) -> DataFrame:
    """Landed rows of ``topic`` + ``_batch_id``, ``_watermark`` and ``_dropped_late``.

    Rows the stream has not read yet get null ``_batch_id`` and ``_dropped_late`` false.
    """
    ranges = [r for r in batch_offset_ranges(progress) if r[1] == topic]
    schema = "_batch_id long, _topic string, _p int, _start long, _end long, _watermark_ms long"
    rdf = spark.createDataFrame(ranges, schema)
    cond = (F.col(PARTITION) == F.col("_p")) & (F.col(OFFSET) >= F.col("_start")) & (F.col(OFFSET) < F.col("_end"))
    out = landed.join(F.broadcast(rdf), cond, "left")
    et_ms = F.unix_millis(F.col(event_time))
    return out.select(
        *landed.columns, "_batch_id",
        F.timestamp_millis("_watermark_ms").alias("_watermark"),
        F.coalesce((F.col("_watermark_ms") > 0) & (et_ms <= F.col("_watermark_ms")), F.lit(False)).alias("_dropped_late"),
    )


def stream_view(spark: SparkSession, spec: JoinSpec, left: DataFrame, right: DataFrame,
                progress: list[dict]) -> tuple[DataFrame, DataFrame]:
    """Both sides' landed rows annotated with what the streaming join did with them."""
    return (
        with_processing_watermark(spark, left, spec.left.topic, progress, spec.left.event_time),
        with_processing_watermark(spark, right, spec.right.topic, progress, spec.right.event_time),
    )
