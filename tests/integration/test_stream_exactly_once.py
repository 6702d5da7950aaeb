"""A crash between the Delta write and the checkpoint commit, then a restart from the checkpoint:
the output must equal an uninterrupted run's exactly, with no row lost or duplicated."""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.testing import assertDataFrameEqual

from jobs.local.chaos import SHORT_WATERMARKS
from jobs.spec import Cardinality

pytestmark = pytest.mark.integration


class Crash(RuntimeError):
    pass


def _isolated_spec(own_pipeline_spec, spec, name: str, cardinality: str, short: bool = False):
    """Own topics, tables and checkpoints; watermarks wide enough that no record is late (so the
    output cannot depend on how the backlog is cut into micro-batches), or
    :data:`jobs.local.chaos.SHORT_WATERMARKS`."""
    eo = own_pipeline_spec(
        name,
        side={"watermark_delay": spec.timestamp_validity.max_past},
        join=spec.join.model_copy(update={"cardinality": Cardinality(cardinality)}),
        # 4 micro-batches of the 411 right records: the crash lands on the third, one is left after it
        streaming=spec.streaming.model_copy(update={"max_offsets_per_trigger": 110}),
    )
    if short:  # and ~14 micro-batches: the watermark follows the arrivals closely enough to drop some
        eo = eo.model_copy(update={"streaming": eo.streaming.model_copy(update={"max_offsets_per_trigger": 30})})
        eo = eo.model_copy(
            update={
                side: eo.side(side).model_copy(update={"watermark_delay": SHORT_WATERMARKS[side]})
                for side in SHORT_WATERMARKS
            }
        )
    return eo


def _run(spark, spec, bootstrap, s, on_batch=None) -> None:
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.progress import JOIN_QUERY, settle_log
    from jobs.storage.tables import Tables

    (q,) = start_streaming_join(
        spark, spec, bootstrap=bootstrap, s=s, available_now=True, quarantine=False, on_batch=on_batch
    )
    q.awaitTermination()
    if q.exception() is None:  # its last micro-batch's progress is on record before it is read
        settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)


def _output(spark, spec, s):
    """The stream's output pairs as they are now (read the table again after it changes)."""
    from jobs.storage.tables import Tables

    df = spark.read.format("delta").load(Tables.of(spec, s).output("stream"))
    return df.select("left_event_id", "right_event_id")


# 1-to-n with short watermarks only: its reference run has the same micro-batches, so a restart that
# lost, repeated or re-cut a batch changes which late rows drop; wide watermarks could not see a re-cut
@pytest.mark.parametrize("cardinality,short", [("1-to-1", False), ("1-to-n", True)])
def test_crash_after_the_delta_write_then_restart_neither_loses_nor_duplicates(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings, test_root, cardinality, short
):
    from jobs.local.chaos import dropped_as_late
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    name = "exactly_once_" + cardinality.replace("-", "") + ("_short" if short else "")
    spec = demo_spec
    eo = _isolated_spec(own_pipeline_spec, spec, name, cardinality, short)
    wl = generate(WorkloadParams(left_events_per_day=300, days=1, seed=11), spec)
    records = wl.records.assign(
        topic=wl.records.topic.map({spec.left.topic: eo.left.topic, spec.right.topic: eo.right.topic})
    )
    for st in (eo.left, eo.right):
        create_topic(kafka, st.topic)
    publish(records, kafka)

    reference = dataclasses.replace(test_settings, storage_root=str(test_root / name / "reference"))
    _run(spark, eo, kafka, reference)
    expected = _output(spark, eo, reference)
    expected_rows = expected.collect()
    if cardinality == "1-to-1":  # at most one match per left event: its first-arrived one
        assert len(expected_rows) > 200 and len({left for left, _ in expected_rows}) == len(expected_rows)
    else:
        assert len(expected_rows) > 300
    # read now: later runs of this pipeline (same query name, another storage root) log there too
    dropped = dropped_as_late(eo, reference)
    assert (dropped > 0) == short  # short: late rows really are dropped (and counted)

    crashed = dataclasses.replace(test_settings, storage_root=str(test_root / name / "crashed"))
    seen: list[int] = []

    def crash_on_third_batch(batch_id: int) -> None:
        seen.append(batch_id)
        if batch_id == 2:
            raise Crash("simulated crash after the Delta write, before the checkpoint commit")

    with pytest.raises(StreamingQueryException, match="simulated crash"):
        _run(spark, eo, kafka, crashed, on_batch=crash_on_third_batch)
    assert seen == [0, 1, 2]
    partial = _output(spark, eo, crashed).count()
    assert 0 < partial < len(expected_rows)

    _run(spark, eo, kafka, crashed)  # restart from the checkpoint: batch 2 runs again
    got = _output(spark, eo, crashed)
    got_rows = got.collect()
    assert len(got_rows) == len(set(got_rows)), "duplicated output rows"
    assertDataFrameEqual(got, expected)
    if short:  # the restarted run dropped (and counted) late rows too; a re-run batch may count its drops twice
        assert dropped_as_late(eo, crashed) >= dropped
