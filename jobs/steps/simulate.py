"""A generated workload as simulated real time: published as history, then replayed as live.

A thin case of :mod:`jobs.steps.replay_live`: the records are published into the spec's topics
at once (each with its arrival time as the Kafka record timestamp), then ``replay_as_live`` admits
them slice by slice of record time, one micro-batch per slice, over the days they arrive on.
One slicing and publishing rule for generated workloads and any other topics.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

import pandas as pd
from pyspark.sql import SparkSession

from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.steps.replay_live import ReplayAsLiveResult, replay_as_live


def publish_history(spec: JoinSpec, records: pd.DataFrame, *, bootstrap: str) -> dict[str, int]:
    """Publish a generated workload into the spec's topics at once (arrival time = record
    timestamp): the history a replay-as-live run reads."""
    from jobs.storage import kafka
    from jobs.workload.publisher import publish

    for stream in (spec.left, spec.right):
        kafka.create_topic(bootstrap, stream.topic)
    return publish(records, bootstrap)


def arrival_days(spec: JoinSpec, records: pd.DataFrame) -> list:
    """The arrival days (spec timezone) ``records`` span."""
    tz = ZoneInfo(spec.timezone)
    first, last = (
        datetime.fromtimestamp(int(ms) / 1000, tz).date() for ms in (records.arrival_ms.min(), records.arrival_ms.max())
    )
    return [first.fromordinal(o) for o in range(first.toordinal(), last.toordinal() + 1)]


def simulate_live(
    spark: SparkSession,
    spec: JoinSpec,
    records: pd.DataFrame,
    *,
    bootstrap: str,
    slice_minutes: float = 30,
    s: Settings | None = None,
    on_slice: Callable[[int, int, int], None] | None = None,
) -> ReplayAsLiveResult:
    """Publish ``records`` as history, then replay them as live over the days they arrive on."""
    if slice_minutes <= 0:
        raise ValueError("slice_minutes must be a positive number of minutes")
    publish_history(spec, records, bootstrap=bootstrap)
    return replay_as_live(
        spark,
        spec,
        bootstrap=bootstrap,
        days=arrival_days(spec, records),
        slice_minutes=slice_minutes,
        s=s,
        on_slice=on_slice,
    )
