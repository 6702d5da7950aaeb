"""The paced engine (``streaming.engine: paced``) on the real broker, Spark and Delta:

* on data with no late rows its output equals ``batch_1d_windowed`` over the same records landed
  from the same topics (pairs and non-matches), with the streams' PTs synchronized by its source;
* its per-key caps and lateness/validity counts are exact on hand-made records;
* a late right event amends a non-match within ``corrections.horizon`` (revision 1, 2, ...);
* a crash after the Delta write, then a restart from the checkpoint (its source's estimators
  restored), leaves the output equal to an uninterrupted run's, late rows and corrections included.
"""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, date, datetime, timedelta

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.testing import assertDataFrameEqual

from jobs.join.paced import METRICS
from jobs.spec import Engine
from tests.integration.test_stream_semantics import left, publish, right

pytestmark = pytest.mark.integration

D20 = date(2026, 11, 20)
T0 = datetime(2026, 11, 20, tzinfo=UTC)


def paced_spec(own_pipeline_spec, demo_spec, name: str, **paced):
    streaming = demo_spec.streaming.model_copy(
        update={"engine": Engine.paced, "paced": demo_spec.streaming.paced.model_copy(update=paced)}
    )
    return own_pipeline_spec(name, streaming=streaming)


def run_stream(spark, spec, kafka, s, on_batch=None) -> None:
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.progress import JOIN_QUERY, settle_log
    from jobs.storage.tables import Tables

    (q,) = start_streaming_join(
        spark, spec, bootstrap=kafka, s=s, available_now=True, quarantine=False, on_batch=on_batch
    )
    q.awaitTermination()
    if q.exception() is None:
        settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)


def output(spark, spec, s):
    from jobs.storage.tables import Tables

    return (
        spark.read.format("delta").load(Tables.of(spec, s).output("stream")).select("left_event_id", "right_event_id")
    )


def progress(spec, s) -> list[dict]:
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    return read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))


def pacing(p: dict) -> dict:
    end = p["sources"][0]["endOffset"]
    return (json.loads(end) if isinstance(end, str) else end)["@paced"]


def test_on_data_with_no_late_rows_the_paced_engine_equals_the_batch_windowed_join(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings
):
    from jobs.steps.batch import run_variant
    from jobs.steps.landing import land_ds
    from jobs.storage.tables import Tables

    # two shards of two blocks: each holds many keys, so one shard's index, and one block, carry
    # keys due at different times
    spec = paced_spec(own_pipeline_spec, demo_spec, "paced_equals_batch", max_records_per_batch=30, shards=2, blocks=2)
    rng = random.Random(20)
    records = []
    for i in range(240):  # a search every 2.5 minutes, 04:00-14:00, 0-3 clicks in [-3h, +30m] around it
        t = T0 + timedelta(hours=4, seconds=150 * i)
        records.append(left(f"L{i}", f"s{i}", t, t + timedelta(seconds=rng.randint(0, 20))))
        for j in range(rng.randint(0, 3)):
            rt = t + timedelta(seconds=rng.randint(-3 * 3600, 1800))
            records.append(right(f"R{i}_{j}", f"s{i}", rt, rt + timedelta(seconds=rng.randint(0, 20))))
    for j in range(72):  # clicks of other sessions until 20:00: the right PT passes every window
        rt = T0 + timedelta(hours=14, minutes=5 * j)
        records.append(right(f"P{j}", f"p{j}", rt, rt + timedelta(seconds=5)))
    publish(kafka, spec, records, partitions=2)

    run_stream(spark, spec, kafka, test_settings)
    stream = {tuple(r) for r in output(spark, spec, test_settings).collect()}
    for side in ("left", "right"):
        land_ds(spark, spec, side, D20, test_settings, bootstrap=kafka)
    run_variant(spark, spec, "batch_1d_windowed", D20, test_settings)
    batch = spark.read.format("delta").load(Tables.of(spec, test_settings).output("batch_1d_windowed"))
    expected = {tuple(r) for r in batch.select("left_event_id", "right_event_id").collect()}

    assert len(expected) > 350 and any(r is None for _, r in expected)  # pairs and non-matches
    assert stream == expected
    paces = [pacing(p) for p in progress(spec, test_settings)]
    assert len(paces) > 10 and paces[-1]["right_pt"] > int((T0 + timedelta(hours=14, minutes=30)).timestamp() * 1000)
    assert max(p["left_admitted"] for p in paces) <= 30 and max(p["right_admitted"] for p in paces) <= 30


def test_per_key_caps_lateness_and_validity_are_counted_exactly(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings
):
    from jobs.spec import Corrections

    spec = paced_spec(own_pipeline_spec, demo_spec, "paced_counts", max_records_per_batch=40, per_key_cap=2)
    spec = spec.model_copy(update={"corrections": Corrections.model_validate({"horizon": "5h"})})
    at = lambda h, m=0, s=0: T0 + timedelta(hours=h, minutes=m, seconds=s)  # noqa: E731
    records = []
    # on-time searches and clicks of sessions of their own, every 2 minutes until 16:00: the PTs (a
    # micro-batch of 40 holds at most one late record below, so its 5th percentile stays on time)
    for i in range(480):
        t = at(0, 2 * i)
        records += [left(f"FL{i}", f"fl{i}", t, t), right(f"FR{i}", f"fr{i}", t, t)]
    records += [right(f"CR{i}", "capR", at(9, 0, i), at(9, 0, i)) for i in range(4)]  # 2 evicted
    records += [left(f"CL{i}", "capL", at(9, 1, i), at(9, 1, i)) for i in range(3)]  # 1 closed at once
    records.append(left("LATE_L", "lateL", at(6), at(12)))  # its window closed hours ago
    records.append(right("LATE_R", "lateR", at(2), at(12, 30)))  # no left event can still match it
    records += [right("DUP", "dupR", at(9, 30), at(9, 30, s)) for s in (1, 40)]  # re-sent: 1 dropped
    records.append(left("FUTURE", "future", at(15), at(10)))  # 5 h ahead of its arrival: quarantined
    # closes as a non-match in the first micro-batch whose right PT passes 08:30 (~09:15 here: a
    # click read in that batch would still be a first answer), amended until it passes 13:30
    records.append(left("AMEND", "amend", at(8), at(8)))
    records.append(right("AR1", "amend", at(8, 10), at(11, 30)))  # amends it: revision 1
    records.append(right("AR2", "amend", at(8, 20), at(12)))  # revision 2 (1-to-n)
    records.append(right("AR3", "amend", at(8, 25), at(15, 30)))  # past the 5 h horizon: dropped
    publish(kafka, spec, records, partitions=1)

    run_stream(spark, spec, kafka, test_settings)
    log = progress(spec, test_settings)
    counts: dict[str, int] = {}
    for p in log:
        for k, v in (p.get("joinshift", {}).get("paced") or {}).items():
            counts[k] = counts.get(k, 0) + v
    assert counts["state_keys"] > 0 and counts["state_bytes"] > 0  # a sample of the state's sizes
    assert {k: v for k, v in counts.items() if k in METRICS} == {
        "right_cap_evicted": 2,
        "left_cap_closed": 1,
        "left_late_closed": 1,
        "right_late_dropped": 2,
        "right_duplicates": 1,
        "left_amended": 2,
    }
    assert sum(pacing(p)["left_outside_validity"] for p in log) == 1
    assert sum(pacing(p)["right_outside_validity"] for p in log) == 0
    rows = {tuple(r) for r in output(spark, spec, test_settings).collect()}
    assert ("LATE_L", None) in rows  # left outer: a non-match, at once
    assert not any(left == "FUTURE" for left, _ in rows)
    from jobs.storage.tables import Tables

    table = spark.read.format("delta").load(Tables.of(spec, test_settings).output("stream"))
    amend = table.where("left_event_id = 'AMEND'")
    amended = sorted(amend.select("right_event_id", "revision", "emitted_at", "amended_at").collect())
    assert [(r.right_event_id, r.revision) for r in amended] == [("AR1", 1), ("AR2", 2)]  # no non-match left
    assert all(r.amended_at is not None for r in amended)
    assert table.where("revision = 0 AND amended_at IS NOT NULL").count() == 0
    # revision 1 kept the replaced non-match's emitted_at (its first answer, read before AR1 came at
    # 11:30); revision 2 is a row of its own, emitted when it was amended
    first, second = amended
    assert first.emitted_at < first.amended_at and second.emitted_at == second.amended_at
    from jobs.accuracy.verify import first_answer_latencies
    from jobs.join.columns import first_answers

    assert [tuple(r) for r in first_answers(amend, spec).select("right_event_id", "emitted_at").collect()] == [
        (None, first.emitted_at)
    ]
    # its first answer's latency (emitted_at is the wall clock here), shorter than its correction's
    (latency,) = first_answer_latencies(amend, spec).tolist()
    since = "(unix_micros(amended_at) - unix_micros(left_event_time)) / 1e6"
    (corrected,) = [r[0] for r in amend.where("revision = 1").selectExpr(since).collect()]
    assert 0 < latency < corrected, (latency, corrected)


def test_a_crash_after_the_delta_write_then_a_restart_leaves_the_output_equal(
    spark, kafka, demo_spec, own_pipeline_spec, test_settings, test_root
):
    from jobs.join.columns import stream_output_columns
    from jobs.spec import Corrections
    from jobs.storage import delta_io
    from jobs.storage.checkpoints import checkpoint_query_id
    from jobs.storage.kafka import create_topic
    from jobs.storage.progress import JOIN_QUERY
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish as send

    name = "paced_restart"
    spec = paced_spec(own_pipeline_spec, demo_spec, name, max_records_per_batch=30, shards=3)
    spec = spec.model_copy(update={"corrections": Corrections.model_validate({"horizon": "6h"})})
    wl = generate(WorkloadParams(left_events_per_day=300, days=1, seed=11), demo_spec)
    topics = {demo_spec.left.topic: spec.left.topic, demo_spec.right.topic: spec.right.topic}
    for st in (spec.left, spec.right):
        create_topic(kafka, st.topic)
    send(wl.records.assign(topic=wl.records.topic.map(topics)), kafka)

    reference = dataclasses.replace(test_settings, storage_root=str(test_root / name / "reference"))
    run_stream(spark, spec, kafka, reference)
    expected = output(spark, spec, reference)
    assert expected.count() > 300
    table = spark.read.format("delta").load(Tables.of(spec, reference).output("stream"))
    assert table.where("revision > 0").count() > 0  # late corrections too, amended through the restart below
    assert sorted(table.columns) == sorted(stream_output_columns(spec))  # what the output gate expects
    tables = Tables.of(spec, reference)
    writer = checkpoint_query_id(tables.checkpoint(JOIN_QUERY))
    wrote = sorted(delta_io.committed_batches(spark, tables.output("stream"), writer))
    assert len(wrote) >= 3  # the crash lands in the middle of them: after PT is known on both sides
    at = wrote[len(wrote) // 2]
    assert all(pacing(p)["left_pt"] >= 0 and pacing(p)["right_pt"] >= 0 for p in progress(spec, reference)[at:])

    crashed = dataclasses.replace(test_settings, storage_root=str(test_root / name / "crashed"))

    def crash(batch_id: int) -> None:
        if batch_id == at:
            raise RuntimeError("simulated crash after the Delta write, before the checkpoint commit")

    with pytest.raises(StreamingQueryException, match="simulated crash"):
        run_stream(spark, spec, kafka, crashed, on_batch=crash)
    assert 0 < output(spark, spec, crashed).count() < expected.count()
    # what an operator asks before the restart: `joinshift checkpoint inspect` reads a paced checkpoint too
    from jobs.operate.checkpoint import inspect_checkpoint, render_inspection

    info = inspect_checkpoint(spark, Tables.of(spec, crashed).checkpoint(JOIN_QUERY), spec=spec)
    assert info["health"]["ok"], info["health"]
    assert set(info["committed_offsets"]) == {spec.left.topic, spec.right.topic}
    held = info["state"]["paced"]
    assert held["keys"] > 0 and held["events"] > 0 and 0 < held["stored_bytes"] < held["raw_bytes"], held
    assert f"{held['events']} buffered events" in render_inspection(info)
    run_stream(spark, spec, kafka, crashed)  # from the checkpoint: that batch again, the estimators restored
    got = output(spark, spec, crashed)
    assert got.count() == got.distinct().count(), "duplicated output rows"
    assertDataFrameEqual(got, expected)
