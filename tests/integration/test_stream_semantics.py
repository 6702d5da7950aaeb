"""Join semantics on the real stream (Kafka -> Spark Structured Streaming -> Delta), on a few
hand-made records in pipelines of their own, checked against the batch variants run on the same
records landed from the same topics:

* an inner join with a window longer than a day and an extra predicate: the stream emits every
  pair in the window the predicate admits (also across two midnights) and no row for an unmatched
  left event; the ``reference`` variant (every right day the window reaches) equals it,
  ``batch_1d_windowed`` loses what crosses midnight;
* 1-to-1 over several micro-batches: the stream keeps per left event the match that arrived
  first, as the batch variant does (one partition per topic: across partitions a rate limit can
  read a later arrival first, which the replay-as-live path addresses).

Watermark delays are the validity horizon (2 d), so no record is late and the output does not
depend on how the records are cut into micro-batches.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pandas as pd
import pytest

from jobs.spec import Cardinality, JoinType

pytestmark = pytest.mark.integration

D20, D21, D22 = date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 22)


def at(day: int, hhmm: str, sec: int = 0) -> datetime:
    h, m = (int(x) for x in hhmm.split(":"))
    return datetime(2026, 11, day, h, m, sec, tzinfo=UTC)


def left(eid: str, key: str, t: datetime, arrival: datetime) -> dict:
    value = {"event_id": eid, "session_id": key, "event_time": t.isoformat(), "query": "q", "result_count": 3}
    return {"side": "left", "key": key, "value": value, "arrival": arrival}


def right(eid: str, key: str, t: datetime, arrival: datetime, position: int = 1) -> dict:
    value = {"event_id": eid, "session_id": key, "event_time": t.isoformat(), "action": "click", "position": position}
    return {"side": "right", "key": key, "value": value, "arrival": arrival}


def publish(kafka, spec, records: list[dict], partitions: int = 1) -> None:
    """The records to the spec's topics (one partition each unless asked), keyed by session, Kafka
    timestamp = arrival, in arrival order."""
    from jobs.storage.kafka import create_topic
    from jobs.workload.publisher import publish as send

    for st in (spec.left, spec.right):
        create_topic(kafka, st.topic, partitions=partitions)
    frame = pd.DataFrame(
        {
            "topic": [spec.side(r["side"]).topic for r in records],
            "key": [r["key"] for r in records],
            "value": [json.dumps(r["value"]) for r in records],
            "arrival_ms": [int(r["arrival"].timestamp() * 1000) for r in records],
        }
    ).sort_values("arrival_ms", kind="stable")
    send(frame, kafka)


def run_stream(spark, spec, kafka, s) -> set[tuple]:
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.progress import JOIN_QUERY, settle_log
    from jobs.storage.tables import Tables

    (q,) = start_streaming_join(spark, spec, bootstrap=kafka, s=s, available_now=True, quarantine=False)
    q.awaitTermination()
    settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)  # as the product's callers do
    out = spark.read.format("delta").load(Tables.of(spec, s).output("stream"))
    return {(r.left_event_id, r.right_event_id) for r in out.select("left_event_id", "right_event_id").collect()}


def run_batch(spark, spec, kafka, s, days: list[date], variants: list[str], ds: date = D20) -> dict[str, set[tuple]]:
    """Land ``days`` of both topics, run ``variants`` for ``ds``: their (left, right) pairs."""
    from jobs.steps.batch import run_variant
    from jobs.steps.landing import land_ds
    from jobs.storage.tables import Tables

    for day in days:
        for side in ("left", "right"):
            land_ds(spark, spec, side, day, s, bootstrap=kafka)
    out = {}
    for v in variants:
        run_variant(spark, spec, v, ds, s)
        df = spark.read.format("delta").load(Tables.of(spec, s).output(v)).where(f"ds = '{ds}'")
        out[v] = {(r.left_event_id, r.right_event_id) for r in df.select("left_event_id", "right_event_id").collect()}
    return out


def test_inner_join_with_a_window_longer_than_a_day_equals_the_reference(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings
):
    from jobs.spec import WindowSpec

    spec = own_pipeline_spec(
        "semantics_inner_long",
        side={"watermark_delay": demo_spec.timestamp_validity.max_past},
        window=WindowSpec.model_validate({"lower": "-1h", "upper": "+30h"}),
        # the extra predicate on fields of both sides, on the stream as in batch
        join=demo_spec.join.model_copy(update={"type": JoinType.inner, "predicate": "r.position <= l.result_count"}),
    )
    publish(
        kafka,
        spec,
        [
            right("R0", "s1", at(20, "08:45"), at(20, "08:46")),
            left("L4", "s1", at(20, "09:30"), at(20, "09:30", 5)),
            left("L1", "s1", at(20, "10:00"), at(20, "10:00", 5)),
            right("R1", "s1", at(20, "10:30"), at(20, "10:31")),
            right("R9", "s1", at(20, "10:40"), at(20, "10:41"), position=9),  # in the window, predicate false
            left("L2", "s2", at(20, "12:00"), at(20, "12:00", 5)),  # no partner: no row in an inner join
            left("L3", "s3", at(20, "22:00"), at(20, "22:00", 5)),
            right("R2", "s1", at(21, "15:00"), at(21, "15:01")),  # L1 + 29h, L4 + 29h30m
            right("R3", "s1", at(21, "17:00"), at(21, "17:01")),  # L1 + 31h: outside
            right("R4", "s3", at(22, "03:00"), at(22, "03:01")),  # L3 + 29h: two midnights later
        ],
    )
    expected = {("L1", "R1"), ("L1", "R2"), ("L4", "R0"), ("L4", "R1"), ("L4", "R2"), ("L3", "R4")}
    stream = run_stream(spark, spec, kafka, test_settings)
    assert stream == expected
    batch = run_batch(spark, spec, kafka, test_settings, [D20, D21, D22], ["reference", "batch_1d_windowed"])
    assert batch["reference"] == stream
    assert batch["batch_1d_windowed"] == {("L1", "R1"), ("L4", "R0"), ("L4", "R1")}  # cut off at midnight


def test_one_to_one_on_the_stream_keeps_the_first_arrived_match_like_batch(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings
):
    spec = own_pipeline_spec(
        "semantics_one_to_one",
        side={"watermark_delay": demo_spec.timestamp_validity.max_past},
        join=demo_spec.join.model_copy(update={"cardinality": Cardinality.one_to_one}),
        # a few records per micro-batch, so a left event and its matches meet across batches
        streaming=demo_spec.streaming.model_copy(update={"max_offsets_per_trigger": 2}),
    )
    publish(
        kafka,
        spec,
        [
            left("L1", "s1", at(20, "10:00"), at(20, "10:00", 5)),
            right("Rb", "s1", at(20, "10:10"), at(20, "10:12")),  # later event, arrived first: the match
            right("Ra", "s1", at(20, "09:50"), at(20, "10:20")),
            right("Rc", "s1", at(20, "10:25"), at(20, "10:26")),
            left("L2", "s2", at(20, "11:00"), at(20, "11:00", 5)),
            right("Rd", "s2", at(20, "10:59"), at(20, "11:30")),  # arrived first: the match
            right("Re", "s2", at(20, "11:20"), at(20, "11:40")),
            right("Rf", "s4", at(20, "12:55"), at(20, "12:56")),  # arrived before its left event: the match
            right("Rg", "s4", at(20, "13:10"), at(20, "13:11")),
            left("L4", "s4", at(20, "13:00"), at(20, "13:20")),
        ],
    )
    stream = run_stream(spark, spec, kafka, test_settings)
    assert stream == {("L1", "Rb"), ("L2", "Rd"), ("L4", "Rf")}
    batch = run_batch(spark, spec, kafka, test_settings, [D20], ["batch_1d_windowed"])["batch_1d_windowed"]
    assert batch == stream
    # each pipeline's progress log holds its own micro-batches only: another pipeline streamed after
    # this one in this process, and this one's listener did not log its batches (a listener once
    # logged every pipeline's query of the same name)
    other = own_pipeline_spec("semantics_one_to_one_neighbour")
    publish(kafka, other, [left("N1", "s9", at(20, "10:00"), at(20, "10:00", 5))])
    run_stream(spark, other, kafka, test_settings)
    assert _assert_logs_its_own_batches_only(spec, test_settings) > 0
    assert _assert_logs_its_own_batches_only(other, test_settings) > 0


def _assert_logs_its_own_batches_only(spec, s) -> int:
    """Every micro-batch in ``spec``'s progress log read ``spec``'s topics; returns how many there are."""
    from jobs.storage.progress import read_progress
    from jobs.storage.tables import Tables

    progress = read_progress(Tables.of(spec, s).progress_log())
    ends = [src.get("endOffset") or {} for p in progress for src in p["sources"]]
    topics = {t for end in ends for t in (json.loads(end) if isinstance(end, str) else end)}
    assert topics <= {spec.left.topic, spec.right.topic}, (spec.pipeline, topics)
    assert {p["name"] for p in progress} <= {f"{spec.pipeline}.stream_join"}
    return len(progress)


def test_the_heap_state_store_carries_the_window_across_micro_batches(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings
):
    """``streaming.state_store: memory`` (Spark's HDFS-backed store, on the JVM heap): micro-batches
    of two records each, so every pair meets across batches through the state; the checkpoint keeps
    that store, and a spec that asks for RocksDB on it is told Spark keeps the checkpoint's."""
    from jobs.operate.checkpoint_validate import validate_checkpoint
    from jobs.spec import StateStore
    from jobs.storage.progress import JOIN_QUERY
    from jobs.storage.tables import Tables

    memory = {"max_offsets_per_trigger": 2, "state_store": StateStore.memory}
    spec = own_pipeline_spec(
        "semantics_heap_store",
        side={"watermark_delay": demo_spec.timestamp_validity.max_past},
        streaming=demo_spec.streaming.model_copy(update=memory),
    )
    publish(
        kafka,
        spec,
        [
            left("L1", "s1", at(20, "10:00"), at(20, "10:00", 5)),
            right("Rb", "s1", at(20, "10:10"), at(20, "10:12")),
            right("Ra", "s1", at(20, "09:50"), at(20, "10:20")),
            right("Rc", "s1", at(20, "10:25"), at(20, "10:26")),
            right("Rx", "s1", at(20, "10:45"), at(20, "10:46")),  # L1 + 45m: past the window's +30m
            left("L2", "s2", at(20, "11:00"), at(20, "11:00", 5)),
            right("Rd", "s2", at(20, "10:59"), at(20, "11:30")),
            right("Rf", "s4", at(20, "12:55"), at(20, "12:56")),  # in state before its left event
            left("L4", "s4", at(20, "13:00"), at(20, "13:20")),
        ],
    )
    stream = run_stream(spark, spec, kafka, test_settings)
    assert stream == {("L1", "Ra"), ("L1", "Rb"), ("L1", "Rc"), ("L2", "Rd"), ("L4", "Rf")}
    checkpoint = Tables.of(spec, test_settings).checkpoint(JOIN_QUERY)
    health = validate_checkpoint(checkpoint, spec=spec)
    assert health.ok and not health.errors and "state_store_fixed" not in health.codes(), health.render()
    assert health.last_committed_batch >= 3  # two records a batch: the pairs met through the state
    on_rocksdb = spec.streaming.model_copy(update={"state_store": StateStore.rocksdb})
    rocksdb = spec.model_copy(update={"streaming": on_rocksdb})
    warned = validate_checkpoint(checkpoint, spec=rocksdb)
    assert warned.ok and "state_store_fixed" in warned.codes()
    assert any("memory store" in i.message and "state_store=rocksdb" in i.message for i in warned.issues)
