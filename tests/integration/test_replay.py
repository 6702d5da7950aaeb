"""Replay into a fresh checkpoint after a window change: the window is rebuilt from Kafka, the
switch writes nothing twice, the old checkpoint is kept, and a retention gap fails clearly."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
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
def published(kafka, demo_spec, own_pipeline_spec):
    """The deployed spec's topics, and the records sent to them."""
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
    return deployed, records


@pytest.fixture(scope="module")
def topics(published):
    return published[0]


def _new_events_arrived_before(records, topic, cutover, hour=1):
    """The good records of ``topic`` that arrived in the hour before ``cutover``, as new events
    (fresh ids): sent now, they are stamped before the cut-over at offsets past a run that read
    the topic to its end (a cut-over of "now", after that run's last micro-batch)."""

    def renamed(value):
        event = json.loads(value)
        event["event_id"] = f"handover-{event['event_id']}"
        return json.dumps(event)

    end = int(cutover.timestamp() * 1000)
    chosen = records[
        (records.topic == topic)
        & records.expected_reason.isna()
        & (records.arrival_ms >= end - hour * 3_600_000)
        & (records.arrival_ms < end)
    ]
    return chosen.assign(value=chosen.value.map(renamed), event_id="handover-" + chosen.event_id)


def test_window_change_replay_rebuilds_and_writes_nothing_twice(
    spark, kafka, demo_spec, own_pipeline_spec, published, test_settings, test_root
):
    """Also: left events that arrived before the cut-over but after the old run's last micro-batch
    are the replay's (by arrival alone, nobody wrote them)."""
    from jobs.operate.replay import replay
    from jobs.workload.publisher import publish

    deployed, records = published
    changed = _spec_for(own_pipeline_spec, demo_spec, "replay", lower="-1h")
    live = dataclasses.replace(test_settings, storage_root=str(test_root / "replay" / "live"))
    _run(spark, deployed, kafka, live)
    before = _rows(spark, deployed, live)
    unread = _new_events_arrived_before(records, deployed.left.topic, CUTOVER)
    publish(unread, kafka)

    plan = replay(spark, changed, CUTOVER, bootstrap=kafka, s=live)
    after = _rows(spark, changed, live)
    assert plan.backup and Path(plan.backup).exists()  # the old checkpoint is kept
    oldest = datetime.fromtimestamp(unread.arrival_ms.min() / 1000, UTC)
    assert (plan.handover["unread"], plan.handover["oldest_unread"]) == (len(unread), oldest.isoformat())
    # the old run wrote rows from the cut-over on: what the last watermark closes goes through the MERGE
    assert plan.closing_batch
    assert len({(a, b) for a, b, _ in after}) == len(after)  # nothing written twice
    cut, handed_over = CUTOVER.replace(tzinfo=None), set(unread.event_id)
    # the old run owns them (before is the table read before the replay: rows, not a DataFrame)
    old_runs = [r for r in after if r[2] < cut and r[0] not in handed_over]
    assertDataFrameEqual(old_runs, [r for r in before if r[2] < cut])

    reference = dataclasses.replace(test_settings, storage_root=str(test_root / "replay" / "reference"))
    _run(spark, changed, kafka, reference)
    ref = _rows(spark, changed, reference)
    wanted = {(a, b) for a, b, t in ref if (t >= cut or a in handed_over) and b is not None}
    assert wanted and wanted <= {(a, b) for a, b, _ in after}  # the rebuilt window finds every match
    assert {a for a, _ in wanted} & handed_over  # the handed-over events' among them

    # a left event the old run read well before the cut-over, its window still open when it stopped
    # (the watermark delays are 2 days): a click for it sent now, after the replay, is found by the
    # live run from the replay's checkpoint. By arrival alone the old run owned it, and nobody did
    left_rec = records[(records.topic == deployed.left.topic) & records.expected_reason.isna()]
    left_rec = left_rec[left_rec.arrival_ms < int(CUTOVER.timestamp() * 1000) - 2 * 3_600_000].iloc[-1]
    left_event = json.loads(left_rec.value)
    seen = datetime.fromisoformat(left_event["event_time"].replace("Z", "+00:00")) + timedelta(minutes=5)
    click = {"event_id": "R-after-the-stop", "session_id": left_event["session_id"], "action": "click",
             "event_time": seen.isoformat().replace("+00:00", "Z"), "position": 1}  # fmt: skip
    stamp = int(seen.timestamp() * 1000) + 60_000
    sent = records[records.topic == deployed.right.topic].head(1)
    publish(sent.assign(value=json.dumps(click), key=left_rec.key, arrival_ms=stamp, event_id=click["event_id"]), kafka)
    _run(spark, changed, kafka, live)
    assert (left_event["event_id"], click["event_id"]) in {(a, b) for a, b, _ in _rows(spark, changed, live)}


def test_a_left_stream_later_than_the_right_finds_its_matches_after_the_replay(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings, test_root
):
    """Left events up to 3 h late (a lagging server) against a right watermark of 10 min: the live
    watermark trails by 3 h, so a left event arriving after the cut-over may be 3 h old, and its
    window reaches right events from before cut-over − window span − the right's delay (1 h 40 min
    here). The rebuilt window must hold them, as a live run's does."""
    from jobs.operate.replay import replay
    from jobs.spec import WindowSpec, parse_duration
    from jobs.storage.kafka import create_topic
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    spec = own_pipeline_spec(
        "replay_late_left",
        window=WindowSpec(lower=parse_duration("-1h"), upper=parse_duration("+30m")),
    )
    spec = spec.model_copy(
        update={
            "left": spec.left.model_copy(update={"watermark_delay": parse_duration("3h")}),
            "right": spec.right.model_copy(update={"watermark_delay": parse_duration("10m")}),
        }
    )
    params = WorkloadParams(
        left_events_per_day=2000, days=1, seed=8, left_straggler_share=0.5, left_straggler_max=parse_duration("3h")
    )
    for st in (spec.left, spec.right):
        create_topic(kafka, st.topic)
    wl = generate(params, demo_spec)
    topics = {demo_spec.left.topic: spec.left.topic, demo_spec.right.topic: spec.right.topic}
    publish(wl.records.assign(topic=wl.records.topic.map(topics)), kafka)

    replayed = dataclasses.replace(test_settings, storage_root=str(test_root / "replay_late_left" / "replayed"))
    plan = replay(spark, spec, CUTOVER, bootstrap=kafka, s=replayed)
    # no output before it: the catch-up ends with its last micro-batch of data, and the non-matches
    # the watermark it reached closes wait for the live run (one micro-batch of data: the data
    # batch's own eviction ran with no watermark yet)
    assert not plan.closing_batch
    assert read_progress(Tables.of(spec, replayed).progress_log(JOIN_QUERY))[-1]["numInputRows"] > 0
    assert not [p for p in _pairs(spark, spec, replayed) if p[1] is None]
    # the live run's first micro-batch with data (a click sent again: dropped as a duplicate, and
    # no newer event time) writes them, once
    clicks = wl.records[wl.records.topic == demo_spec.right.topic]
    publish(clicks.tail(1).assign(topic=spec.right.topic), kafka)
    _run(spark, spec, kafka, replayed)
    reference = dataclasses.replace(test_settings, storage_root=str(test_root / "replay_late_left" / "reference"))
    _run(spark, spec, kafka, reference)

    cut = CUTOVER.replace(tzinfo=None)
    ref = _pairs(spark, spec, reference)
    wanted = {(a, b) for a, b, la, rt in ref if la >= cut and b is not None}
    # the case this test is for: pairs whose right event is older than span + the right's delay
    old_start = cut - (spec.window.upper - spec.window.lower) - spec.right.watermark_delay
    assert any(rt < old_start for a, b, la, rt in ref if la >= cut and b is not None)
    pairs = _pairs(spark, spec, replayed)
    got = {(a, b) for a, b, _, _ in pairs}
    assert wanted <= got, f"{len(wanted - got)} of {len(wanted)} matches missing after the replay"
    unmatched = {a for a, b, la, _ in ref if la >= cut and b is None}
    assert unmatched and {a for a, b, _, _ in pairs if b is None} == unmatched
    assert len({(a, b) for a, b, _, _ in pairs}) == len(pairs)  # nothing written twice


def _pairs(spark, spec, s):
    """(left id, right id, left arrival, right event time) of the stream's output."""
    from jobs.join.columns import col_name
    from jobs.storage.tables import Tables

    df = spark.read.format("delta").load(Tables.of(spec, s).output("stream"))
    rt = col_name("right", spec.right.event_time)
    return df.select("left_event_id", "right_event_id", "left_arrival_time", rt).collect()


def test_replay_start_is_where_the_live_state_reaches_back_to(demo_spec):
    """The watermark at the cut-over trails by the larger delay; the right side reaches back a
    window's lower bound further, the left side (ids only) to the watermark."""
    from datetime import timedelta

    from jobs.operate.replay import replay_start
    from jobs.spec import Engine

    trail = max(demo_spec.left.watermark_delay, demo_spec.right.watermark_delay)
    assert CUTOVER - replay_start(demo_spec, "right", CUTOVER) == trail - demo_spec.window.lower
    assert CUTOVER - replay_start(demo_spec, "left", CUTOVER) == trail
    late_left = demo_spec.model_copy(
        update={"left": demo_spec.left.model_copy(update={"watermark_delay": timedelta(hours=5)})}
    )
    assert CUTOVER - replay_start(late_left, "right", CUTOVER) == timedelta(hours=5) - demo_spec.window.lower
    paced = demo_spec.model_copy(update={"streaming": demo_spec.streaming.model_copy(update={"engine": Engine.paced})})
    span = timedelta(seconds=demo_spec.window.span_seconds)
    assert CUTOVER - replay_start(paced, "right", CUTOVER) == span + demo_spec.right.watermark_delay


def test_a_users_no_data_batch_setting_decides_the_closing_micro_batch(demo_spec, test_settings):
    """A user's ``spark_conf`` wins either way, before the output is read (no Spark here); without
    it the paced engine always closes with a micro-batch without data."""
    from jobs.operate.replay import _ends_with_closing_batch
    from jobs.spec import Engine
    from jobs.storage.spark import NO_DATA_BATCHES

    paced = demo_spec.model_copy(update={"streaming": demo_spec.streaming.model_copy(update={"engine": Engine.paced})})
    users = lambda value: dataclasses.replace(test_settings, spark_conf={NO_DATA_BATCHES: value})  # noqa: E731
    assert _ends_with_closing_batch(None, demo_spec, CUTOVER, users("TRUE")) is True
    assert _ends_with_closing_batch(None, paced, CUTOVER, users("false")) is False
    assert _ends_with_closing_batch(None, paced, CUTOVER, test_settings) is True


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


def test_the_plan_says_what_the_old_run_hands_over_and_fails_when_kafka_deleted_what_it_had_not_read(
    kafka, demo_spec, own_pipeline_spec, test_settings, test_root
):
    """No Spark: the plan reads the old checkpoint's last committed offsets (written here in
    Spark's offset-log format: what `test_window_change_replay...` reads from a real run) and Kafka."""
    from kafka import KafkaAdminClient, TopicPartition

    from jobs.operate.replay import plan_replay
    from jobs.storage.kafka import RetentionGap, create_topic, end_offsets
    from jobs.storage.progress import JOIN_QUERY
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    spec = own_pipeline_spec("replay_handover")
    s = dataclasses.replace(test_settings, storage_root=str(test_root / "replay_handover"))
    wl = generate(WorkloadParams(left_events_per_day=40, days=1, seed=3), demo_spec)
    for st in (spec.left, spec.right):
        create_topic(kafka, st.topic)
    topics = {demo_spec.left.topic: spec.left.topic, demo_spec.right.topic: spec.right.topic}
    publish(wl.records.assign(topic=wl.records.topic.map(topics)), kafka)
    late = datetime(2026, 11, 25, tzinfo=UTC)  # after every record
    assert plan_replay(spec, late, kafka, s).handover == {"note": "no old checkpoint: ownership by arrival alone"}

    checkpoint = Path(Tables.of(spec, s).checkpoint(JOIN_QUERY))
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    assert plan_replay(spec, late, kafka, s).handover["note"].startswith("the old checkpoint committed no read of")
    ends = end_offsets(kafka, [spec.left.topic])[spec.left.topic]
    read_to = {p: 1 for p in ends}  # one record of each partition read
    sources = [{spec.left.topic: {str(p): o for p, o in read_to.items()}}, {spec.right.topic: {"0": 0, "1": 0}}]
    watermark = datetime(2026, 11, 19, 0, 30, tzinfo=UTC)  # the old run's last micro-batch ran with it
    meta = {"batchWatermarkMs": int(watermark.timestamp() * 1000)}
    (checkpoint / "offsets" / "0").write_text("\n".join(["v1", json.dumps(meta), *map(json.dumps, sources)]))
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    plan = plan_replay(spec, late, kafka, s)
    assert plan.handover["read_to"] == {str(p): 1 for p in ends}
    assert plan.handover["unread"] == sum(ends.values()) - len(ends)
    # the unread are older than the cut-over: read from the old run's offsets at the latest, the
    # state from where it reaches back to at the oldest of them
    assert all(o <= 1 for o in plan.offsets[spec.left.topic].values())
    at = datetime.fromisoformat
    assert at(plan.starts[spec.left.topic]) < at(plan.handover["oldest_unread"]) < late

    # the left events whose window the old run still held open are the new run's too: its state
    # reaches back from the oldest of them (the larger watermark delay, the right's 2 h, before it)
    open_from = watermark - spec.window.upper
    said = (plan.handover["old_watermark"], plan.handover["open_from"])
    assert said == (watermark.isoformat(), open_from.isoformat())
    assert plan.starts[spec.left.topic] == (open_from - spec.right.watermark_delay).isoformat()

    # a replay that failed part-way left its hold, marked failed, and its half-built checkpoint in
    # the old one's place (the old one a backup): run again, the replay reads the handover its
    # first run recorded there, not where the half-built one got to
    from jobs.operate.replay import HANDOVER_RECORD, HOLD_REASON
    from jobs.storage.hold import current_hold, hold

    with pytest.raises(RuntimeError, match="broker gone"):
        with hold(spec, s, reason=f"{HOLD_REASON} {late.isoformat()}"):
            checkpoint.rename(checkpoint.with_name(checkpoint.name + ".bak-1"))
            (checkpoint / "offsets").mkdir(parents=True)
            (checkpoint / "commits").mkdir()
            (checkpoint / HANDOVER_RECORD).write_text(json.dumps(plan.handover))
            sources = [{spec.left.topic: {str(p): 3 for p in ends}}, {spec.right.topic: {"0": 0, "1": 0}}]
            (checkpoint / "offsets" / "0").write_text("\n".join(["v1", json.dumps({}), *map(json.dumps, sources)]))
            (checkpoint / "commits" / "0").write_text("v1\n{}\n")
            raise RuntimeError("broker gone")
    assert current_hold(spec, s)["failed"]
    assert plan_replay(spec, late, kafka, s).handover["read_to"] == {str(p): 1 for p in ends}

    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.delete_records({TopicPartition(spec.left.topic, 0): 3})  # what retention would have removed
    finally:
        admin.close()
    with pytest.raises(
        RetentionGap, match=r"the old run had not read partition 0 from offset 1 \(Kafka holds it from 3"
    ):
        plan_replay(spec, late, kafka, s)
