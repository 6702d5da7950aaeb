"""Replay a generated workload into Kafka as simulated real time, with the streaming join running.

A stream's accuracy depends on how arrivals are cut into micro-batches: one micro-batch over two
days of backlog would hide every late-data loss, because the watermark would never be ahead of
any record. So arrivals are published slice by slice (``slice_minutes`` of simulated time) and
the running query finishes each slice (``processAllAvailable``) before the next is published:
watermarks advance as they would live, deterministically.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import SparkSession

from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.steps.stream import start_streaming_join

log = logging.getLogger("joinshift.simulate")


@dataclass
class SimulationResult:
    slices: int
    records: int
    published: dict[str, int]
    seconds: float


def simulate_live(
    spark: SparkSession,
    spec: JoinSpec,
    records: pd.DataFrame,
    *,
    bootstrap: str,
    slice_minutes: int = 30,
    s: Settings | None = None,
    on_slice: Callable[[int, int, int], None] | None = None,
) -> SimulationResult:
    """Publish ``records`` slice by slice while the streaming join consumes them.

    ``on_slice(done, total, slice_end_ms)`` is called after each slice (progress display).
    """
    from jobs.steps.stream import start_quarantine
    from jobs.storage import kafka
    from jobs.workload.publisher import iter_slices, publish

    if slice_minutes <= 0:
        raise ValueError("slice_minutes must be a positive number of minutes")
    for stream in (spec.left, spec.right):
        kafka.create_topic(bootstrap, stream.topic)
    slices = list(iter_slices(records, slice_minutes))
    started = time.monotonic()
    published: dict[str, int] = {}
    # Every slice brings data, so the data batch itself applies the watermark the previous one
    # computed; the extra no-data batch per slice would only double the micro-batch count.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    # quarantine does not change accuracy: it catches up once at the end, not per slice
    (join_query,) = start_streaming_join(
        spark, spec, bootstrap=bootstrap, s=s, trigger_interval="0 seconds", quarantine=False
    )
    producer = kafka.producer(bootstrap)
    try:
        for i, (slice_end_ms, chunk) in enumerate(slices, 1):
            for topic, n in publish(chunk, bootstrap, producer=producer).items():
                published[topic] = published.get(topic, 0) + n
            join_query.processAllAvailable()
            if on_slice:
                on_slice(i, len(slices), slice_end_ms)
    finally:
        producer.close()
        join_query.stop()
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    start_quarantine(spark, spec, bootstrap=bootstrap, s=s, available_now=True).awaitTermination()
    result = SimulationResult(len(slices), len(records), published, time.monotonic() - started)
    log.info(
        "simulated %d slices of %d min: %d records in %.0fs",
        result.slices,
        slice_minutes,
        result.records,
        result.seconds,
    )
    return result
