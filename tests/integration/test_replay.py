"""Replay into a fresh checkpoint after a window change: the window is rebuilt from Kafka, the
switch writes nothing twice, the old checkpoint is kept, and a retention gap fails clearly."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

pytestmark = pytest.mark.integration

CUTOVER = datetime(2026, 11, 19, 12, 0, tzinfo=UTC)


def _spec_for(own_pipeline_spec, spec, name, lower="-3h", upper="+30m"):
    from jobs.spec import WindowSpec, parse_duration

    return own_pipeline_spec(
        name,
        side={"watermark_delay": spec.timestamp_validity.max_past},
        window=WindowSpec(lower=parse_duration(lower), upper=parse_duration(upper)),
        streaming=spec.streaming.model_copy(update={"max_offsets_per_trigger": 400}),
    )


def _rows(spark, spec, s):
    """The stream output's (left_event_id, right_event_id, left_arrival_time) rows as of now."""
    from jobs.storage.tables import Tables

    df = spark.read.format("delta").load(Tables.of(spec, s).output("stream"))
    return df.select("left_event_id", "right_event_id", "left_arrival_time").collect()


def _run(spark, spec, kafka, s):
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.progress import JOIN_QUERY, settle_log
    from jobs.storage.tables import Tables

    (q,) = start_streaming_join(spark, spec, bootstrap=kafka, s=s, available_now=True, quarantine=False)
    q.awaitTermination()
    settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)


@pytest.fixture(scope="module")
def topics(kafka, demo_spec, own_pipeline_spec):
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    spec = demo_spec
    deployed = _spec_for(own_pipeline_spec, spec, "replay")
    wl = generate(WorkloadParams(left_events_per_day=300, days=1, seed=5), spec)
    records = wl.records.assign(
        topic=wl.records.topic.map({spec.left.topic: deployed.left.topic, spec.right.topic: deployed.right.topic})
    )
    for st in (deployed.left, deployed.right):
        create_topic(kafka, st.topic)
    publish(records, kafka)
    return deployed


def test_window_change_replay_rebuilds_and_writes_nothing_twice(
    spark, kafka, demo_spec, own_pipeline_spec, topics, test_settings, test_root
):
    from jobs.operate.replay import replay

    deployed = topics
    changed = _spec_for(own_pipeline_spec, demo_spec, "replay", lower="-1h")
    live = dataclasses.replace(test_settings, storage_root=str(test_root / "replay" / "live"))
    _run(spark, deployed, kafka, live)
    before = _rows(spark, deployed, live)

    plan = replay(spark, changed, CUTOVER, bootstrap=kafka, s=live)
    after = _rows(spark, changed, live)
    assert plan.backup and Path(plan.backup).exists()  # the old checkpoint is kept
    assert len({(a, b) for a, b, _ in after}) == len(after)  # nothing written twice
    cut = CUTOVER.replace(tzinfo=None)
    # the old run owns them (before is the table read before the replay: rows, not a DataFrame)
    assertDataFrameEqual([r for r in after if r[2] < cut], [r for r in before if r[2] < cut])

    reference = dataclasses.replace(test_settings, storage_root=str(test_root / "replay" / "reference"))
    _run(spark, changed, kafka, reference)
    wanted = {(a, b) for a, b, t in _rows(spark, changed, reference) if t >= cut and b is not None}
    assert wanted and wanted <= {(a, b) for a, b, _ in after}  # the rebuilt window finds every match


def test_replay_start_is_cutover_minus_span_minus_watermark(demo_spec):
    from jobs.operate.replay import replay_start

    start = replay_start(demo_spec, "right", CUTOVER)
    assert (CUTOVER - start).total_seconds() == demo_spec.window.span_seconds + demo_spec.right.watermark_seconds


def test_a_retention_gap_fails_naming_it_and_the_alternative(kafka, topics):
    from kafka import KafkaAdminClient, TopicPartition

    from jobs.operate.replay import plan_replay
    from jobs.storage.kafka import RetentionGap

    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        tp = TopicPartition(topics.right.topic, 0)
        admin.delete_records({tp: 50})  # what retention would have removed
    finally:
        admin.close()
    with pytest.raises(RetentionGap, match=r"landed Delta tables"):
        plan_replay(topics, CUTOVER, kafka)
