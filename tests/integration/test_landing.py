"""Landing one ds from a real broker: a record stamped inside the day is landed even when it sits
in its partition after records stamped the next day (producers whose clocks differ share a
partition), and only once: the next day's landing does not take it; and a record stamped years
ahead does not end the later days' reads of its partition."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest

pytestmark = pytest.mark.integration

DAY = date(2026, 11, 20)
MIDNIGHT = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)


def _one_partition_topics(kafka, spec) -> None:
    from jobs.storage import kafka as kafka_io

    for st in (spec.left, spec.right):
        kafka_io.create_topic(kafka, st.topic, partitions=1)


def _publish(kafka, topic: str, arrivals: dict[str, datetime], event_time_cap: datetime | None = None) -> None:
    """Left events in this offset order into the one partition, each stamped with its arrival and
    happening a minute before it (or before ``event_time_cap``)."""
    from jobs.storage import kafka as kafka_io

    producer = kafka_io.producer(kafka)
    try:
        for event_id, arrival in arrivals.items():
            happened = min(arrival, event_time_cap or arrival) - timedelta(minutes=1)
            value = {"event_id": event_id, "session_id": "s1", "query": "q", "result_count": 1}
            value["event_time"] = happened.strftime("%Y-%m-%dT%H:%M:%S.000Z")
            stamp = int(arrival.timestamp() * 1000)
            producer.send(topic, value=json.dumps(value).encode(), partition=0, timestamp_ms=stamp)
        producer.flush()
    finally:
        producer.close()


def _land_two_days(spark, kafka, spec, test_settings) -> dict[date, list[str]]:
    """The left event ids ``DAY`` and the day after land, each landing accounting for all it read."""
    from jobs.steps.landing import land_ds
    from jobs.storage.tables import Tables

    landed = {}
    for ds in (DAY, DAY + timedelta(days=1)):
        result = land_ds(spark, spec, "left", ds, test_settings, bootstrap=kafka)
        assert result.quarantined_total == 0, result.quarantined
        rows = spark.read.format("delta").load(Tables.of(spec, test_settings).landed("left")).where(f"ds = '{ds}'")
        landed[ds] = sorted(r.event_id for r in rows.select("event_id").collect())
        assert result.records == result.landed == len(landed[ds])
    return landed


def test_a_record_behind_the_next_days_records_in_its_partition_is_landed_on_its_day(
    spark, kafka, own_pipeline_spec, test_settings
):
    from jobs.storage.tables import Tables

    spec = own_pipeline_spec("landing_disorder")
    _one_partition_topics(kafka, spec)
    # offset order in the one partition; the third producer's clock is 8 minutes behind
    arrivals = {
        "L1": MIDNIGHT - timedelta(minutes=10),
        "L2": MIDNIGHT + timedelta(minutes=5),
        "L3": MIDNIGHT - timedelta(minutes=3),
        "L4": MIDNIGHT + timedelta(minutes=10),
    }
    _publish(kafka, spec.left.topic, arrivals)
    landed = _land_two_days(spark, kafka, spec, test_settings)
    assert landed == {DAY: ["L1", "L3"], DAY + timedelta(days=1): ["L2", "L4"]}
    # the days each side holds, from the landing log: left both days, right none yet
    from jobs.steps.batch import landed_days, landed_sides

    tables = Tables.of(spec, test_settings)
    assert landed_sides(spark, tables) == {"left": [DAY, DAY + timedelta(days=1)], "right": []}
    assert landed_days(spark, tables, "right") == [] and landed_days(spark, tables, "left") == [
        DAY,
        DAY + timedelta(days=1),
    ]


def test_a_record_stamped_years_ahead_does_not_end_every_later_days_read_of_its_partition(
    spark, kafka, own_pipeline_spec, test_settings
):
    """Kafka's offsets-for-times answers "the first offset stamped at or after T": a record stamped
    2099 (a producer's clock) was that offset for every day's end, so each day's read stopped there
    and the records behind it were never landed, with no count anywhere."""
    from jobs.steps.landing import ds_bounds_ms
    from jobs.storage import kafka as kafka_io

    spec = own_pipeline_spec("landing_stamped_ahead")
    _one_partition_topics(kafka, spec)
    day = datetime(2026, 11, 20, tzinfo=UTC)
    arrivals = {  # offset order in the one partition
        "L1": day + timedelta(hours=10),
        "X": datetime(2099, 1, 1, tzinfo=UTC),
        "L2": day + timedelta(hours=11),
        "L3": day + timedelta(hours=12),
        "L4": day + timedelta(days=1, hours=10),
    }
    _publish(kafka, spec.left.topic, arrivals, event_time_cap=day + timedelta(days=1, hours=11))
    landed = _land_two_days(spark, kafka, spec, test_settings)
    assert landed == {DAY: ["L1", "L2", "L3"], DAY + timedelta(days=1): ["L4"]}
    # the replay-as-live trial reads history by the same offsets
    start_ms, end_ms = ds_bounds_ms(DAY, "UTC")
    read = kafka_io.read_by_time(kafka, [spec.left.topic], start_ms, end_ms)
    assert [json.loads(r[5])["event_id"] for r in read] == ["L1", "L2", "L3"]


def test_a_day_of_a_topic_not_made_yet_lands_nothing(spark, kafka, own_pipeline_spec, test_settings):
    from jobs.steps.landing import land_ds

    spec = own_pipeline_spec("landing_no_topic")
    result = land_ds(spark, spec, "left", DAY, test_settings, bootstrap=kafka)
    assert (result.records, result.landed, result.quarantined_total) == (0, 0, 0)


def test_a_landed_day_the_topic_no_longer_holds_all_of_is_kept_not_replaced_by_its_remains(
    spark, kafka, own_pipeline_spec, test_settings, tmp_path, capsys
):
    """Landing a ds again replaces it. After Kafka's retention deleted its first records (or the
    topic itself), the landed day became what was left of it, silently; the runbooks send
    operators to re-land days exactly then."""
    from kafka import TopicPartition

    from jobs.cli import main
    from jobs.spec import write_spec
    from jobs.steps.landing import land_ds
    from jobs.storage import kafka as kafka_io
    from jobs.storage.tables import Tables

    spec = own_pipeline_spec("landing_retention")
    _one_partition_topics(kafka, spec)
    day = datetime(2026, 11, 20, tzinfo=UTC)
    _publish(kafka, spec.left.topic, {"L1": day + timedelta(hours=10), "L2": day + timedelta(hours=12)})
    _publish(kafka, spec.left.topic, {"L3": day + timedelta(days=1, hours=10)})

    def landed(ds) -> list[str]:
        rows = spark.read.format("delta").load(Tables.of(spec, test_settings).landed("left")).where(f"ds = '{ds}'")
        return sorted(r.event_id for r in rows.select("event_id").collect())

    land_ds(spark, spec, "left", DAY, test_settings, bootstrap=kafka)
    assert landed(DAY) == ["L1", "L2"]
    admin = kafka_io.admin_client(kafka)
    try:
        admin.delete_records({TopicPartition(spec.left.topic, 0): 1})  # retention took L1
    finally:
        admin.close()

    path = str(write_spec(spec, tmp_path / "landing_retention.yaml"))
    with pytest.raises(SystemExit) as refused:
        main(["land", "--spec", path, "--ds", str(DAY)])
    assert refused.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"joinshift land: {spec.left.topic}[0] no longer holds records from 2026-11-20T00:00:00+00:00: the oldest "
        f"retained record is from 2026-11-20T12:00:00+00:00; ds 2026-11-20 of {spec.left.name} stays as it was "
        "landed; land again only days the topic still holds"
    ), err
    assert landed(DAY) == ["L1", "L2"]
    # a day it still holds lands (the first time, or again)
    land_ds(spark, spec, "left", DAY + timedelta(days=1), test_settings, bootstrap=kafka)
    land_ds(spark, spec, "left", DAY + timedelta(days=1), test_settings, bootstrap=kafka)
    assert landed(DAY + timedelta(days=1)) == ["L3"]
