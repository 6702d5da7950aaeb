"""replay-as-live on crafted history in a real broker: two runs give identical output tables
(``emitted_at`` included), and a partition whose records come hours ahead in offset order cannot
move the watermark past an on-time row of another partition."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from pyspark.testing import assertDataFrameEqual

pytestmark = pytest.mark.integration

DAY = date(2026, 11, 20)
T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _left(i: int, t: datetime) -> dict:
    return {"event_id": f"L{i}", "session_id": f"s{i}", "event_time": _iso(t), "query": "q", "result_count": 1}


def _right(i: int, session: int, t: datetime) -> dict:
    return {"event_id": f"R{i}", "session_id": f"s{session}", "event_time": _iso(t), "action": "click", "position": 1}


def _send(bootstrap: str, topic: str, rows: list[tuple[dict | str, datetime, int | None]]) -> None:
    """(payload, arrival time, partition) in this offset order; partition None: by key."""
    from jobs.storage import kafka

    producer = kafka.producer(bootstrap)
    try:
        for payload, arrival, partition in rows:
            value = payload if isinstance(payload, str) else json.dumps(payload)
            key = payload["session_id"].encode() if isinstance(payload, dict) else None
            producer.send(
                topic, key=key, value=value.encode(), partition=partition, timestamp_ms=int(arrival.timestamp() * 1000)
            )
        producer.flush()
    finally:
        producer.close()


def _stream(spark, spec, s):
    from jobs.storage.tables import Tables

    return spark.read.format("delta").load(Tables.of(spec, s).output("stream"))


def test_two_runs_give_identical_output_tables(spark, kafka, own_pipeline_spec, test_settings):
    from jobs.steps.replay_live import replay_as_live
    from jobs.storage import kafka as kafka_io
    from jobs.storage.stream_runs import rate_label, run_of
    from jobs.storage.tables import Tables

    spec = own_pipeline_spec("replay_as_live_twice")
    for st in (spec.left, spec.right):
        kafka_io.create_topic(kafka, st.topic)
    lefts, rights = [], []
    for i in range(24):  # 10:00 .. 12:45, searches every 7 minutes
        t = T0 + timedelta(minutes=7 * i)
        lefts.append((_left(i, t), t + timedelta(seconds=5), None))
        late = timedelta(hours=2, minutes=30) if i % 5 == 0 else timedelta(minutes=2)  # some behind the 2h watermark
        rights.append((_right(i, i, t + timedelta(minutes=1)), t + timedelta(minutes=1) + late, None))
    rights.append(("not json", T0 + timedelta(minutes=3), None))
    _send(kafka, spec.left.topic, lefts)
    _send(kafka, spec.right.topic, rights)

    first = replay_as_live(spark, spec, bootstrap=kafka, days=[DAY], slice_minutes=30, s=test_settings)
    rows = _stream(spark, spec, test_settings).collect()
    second = replay_as_live(spark, spec, bootstrap=kafka, days=[DAY], slice_minutes=30, s=test_settings)

    assertDataFrameEqual(_stream(spark, spec, test_settings), rows)
    assert first.batches == second.batches == 10  # one micro-batch per slice holding records: 10:00 .. 14:30
    assert first.records == second.records == 49
    assert len(rows) > 15 and len({r.left_event_id for r in rows}) == len(rows)
    # emitted at the end of a slice of record time (the simulated now), never before the event
    assert all(r.emitted_at.minute in (0, 30) and r.emitted_at.second == 0 for r in rows)
    assert all(r.emitted_at.astimezone(UTC) > r.left_event_time.astimezone(UTC) for r in rows)
    quarantined = spark.read.format("delta").load(Tables.of(spec, test_settings).quarantine)
    assert quarantined.where("stage = 'stream'").count() == 1  # the bad record, once: the trial starts fresh
    run = run_of(spec, DAY, test_settings)
    assert run is not None and run["kind"] == "replay-as-live" and rate_label(run) == "replay-as-live (30m slices)"


def test_a_partition_published_hours_ahead_cannot_drop_an_on_time_row(
    spark, kafka, own_pipeline_spec, test_settings, test_root, capsys
):
    """Partition 0 holds records 4h ahead *before* (in offset order) an on-time one; partition 1
    an on-time search. Read by offsets (one micro-batch a partition's head), the watermark would
    be 4h ahead of both on-time pairs; admitted by arrival time (the CLI, as a trial under its
    own pipeline name), both match."""
    from jobs.cli import main
    from jobs.spec import write_spec
    from jobs.storage import kafka as kafka_io

    spec = own_pipeline_spec("replay_as_live_skew")
    for st in (spec.left, spec.right):
        kafka_io.create_topic(kafka, st.topic, partitions=2)
    ahead = T0 + timedelta(hours=4)
    _send(
        kafka,
        spec.left.topic,
        [
            (_left(100, ahead), ahead, 0),  # hours ahead, first in partition 0's offset order
            (_left(101, ahead + timedelta(minutes=1)), ahead + timedelta(minutes=1), 0),
            (_left(1, T0), T0 + timedelta(seconds=5), 0),  # on time, after them in offset order
            (_left(2, T0 + timedelta(minutes=2)), T0 + timedelta(minutes=2, seconds=5), 1),
        ],
    )
    _send(
        kafka,
        spec.right.topic,
        [
            (_right(100, 100, ahead + timedelta(minutes=1)), ahead + timedelta(minutes=2), 0),
            (_right(1, 1, T0 + timedelta(minutes=1)), T0 + timedelta(minutes=3), 1),
            (_right(2, 2, T0 + timedelta(minutes=3)), T0 + timedelta(minutes=5), 0),
        ],
    )
    spec_file = write_spec(spec, test_root / "replay_as_live_skew" / "spec.yaml")
    trial = spec.model_copy(update={"pipeline": "replay_as_live_skew_trial"})
    capsys.readouterr()
    assert (
        main(["replay-as-live", "--spec", str(spec_file), "--from", str(DAY), "--slice", "30m", "--as", trial.pipeline])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    pairs = {(r.left_event_id, r.right_event_id) for r in _stream(spark, trial, test_settings).collect()}
    assert {("L1", "R1"), ("L2", "R2"), ("L100", "R100")} <= pairs
    assert result["batches"] == 2 and result["source_pipeline"] == spec.pipeline  # 10:00-10:30 and 14:00-14:30


def test_an_increment_over_a_backlog_is_labelled_an_upper_bound(spark, kafka, own_pipeline_spec, test_settings):
    """Records that arrived days ago, read by one availableNow increment: a backlog run; compare's
    table says its rate is an upper bound."""
    from rich.console import Console

    from jobs.accuracy.compare import render_table
    from jobs.steps.stream import run_increment
    from jobs.storage import kafka as kafka_io
    from jobs.storage.stream_runs import read_runs

    spec = own_pipeline_spec("replay_as_live_backlog")
    for st in (spec.left, spec.right):
        kafka_io.create_topic(kafka, st.topic)
    _send(kafka, spec.left.topic, [(_left(1, T0), T0 + timedelta(seconds=5), None)])
    _send(kafka, spec.right.topic, [(_right(1, 1, T0 + timedelta(minutes=1)), T0 + timedelta(minutes=2), None)])
    assert run_increment(spark, spec, bootstrap=kafka, s=test_settings)["run"] == "backlog"
    runs = read_runs(spec, test_settings)
    assert runs[str(DAY)]["kind"] == "backlog"
    metrics = [{"ds": DAY, "variant": "stream", "match_rate": 1.0, "to_lower_p99": 60.0, "to_upper_p99": 0.0}]
    console = Console(width=240, record=True)
    console.print(render_table(metrics, runs=runs))
    # the caption wraps at the table's width: read it as one line
    assert "upper bound (backlog run)" in " ".join(console.export_text().split())
