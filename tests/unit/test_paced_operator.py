"""The paced operator's Spark shell: a side's output values packed into one JSON text before the
operator and read back after it, exactly (the operator carries them, never reads them)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest


@pytest.mark.parametrize("timezone", ["UTC", "America/Los_Angeles"])
def test_a_sides_values_come_back_from_their_packed_text_exactly(spark, demo_spec, timezone):
    from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, col_name
    from jobs.join.paced_operator import _packed, _unpacked

    schema = {**demo_spec.left.schema_, "score": "double", "seen": "boolean", "clicks": "long"}
    spec = demo_spec.model_copy(update={"left": demo_spec.left.model_copy(update={"schema_": schema})})
    fold = datetime(2026, 11, 1, 9, 30, 0, 123456, tzinfo=UTC)  # 01:30 in Los Angeles the second time that night
    rows = [
        ("e1", "s1", fold, "", 0, 0.1 + 0.2, True, 2**40, fold, 3, 2**33, date(2026, 11, 1)),
        ("e2", None, datetime(2026, 11, 20, 0, 0, 0, 1, tzinfo=UTC), 'a "quoted", {x}', None, None, False, None,
         datetime(2026, 11, 20, 0, 0, 1, tzinfo=UTC), 0, 0, date(2026, 11, 20)),
    ]  # fmt: skip
    names = [*schema, ARRIVAL_TIME, PARTITION, OFFSET, "ds"]
    ddl = (
        "event_id string, session_id string, event_time timestamp, query string, result_count int, score double, "
        f"seen boolean, clicks bigint, {ARRIVAL_TIME} timestamp, {PARTITION} int, {OFFSET} bigint, ds date"
    )
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", timezone)
    try:
        events = spark.createDataFrame(rows, ddl)
        packed = events.select(_packed(spec, "left", "").alias("text"))
        back = packed.select(*_unpacked(spec, "left", "text")).collect()
        original = events.collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert [r.asDict() for r in back] == [
        {("ds" if c == "ds" else col_name("left", c)): r[c] for c in names} for r in original
    ]
    assert back[0][col_name("left", "event_time")] == original[0]["event_time"]  # to the microsecond


def test_a_shard_steps_every_key_due_by_this_micro_batchs_right_pt():
    """Not only the keys with rows: the others' timers would fire one micro-batch later (Spark's
    watermark is the last micro-batch's right PT), and a backlog's micro-batch spans most of an hour."""
    from jobs.join.paced_operator import due_keys

    dues = {("a",): 100, ("b",): 250, ("c",): 200}
    assert due_keys(dues, 200) == [("a",), ("c",)]
    assert due_keys(dues, 200, stepped={("a",): None}) == [("c",)]
    assert due_keys(dues, 99) == [] and due_keys(dues, None) == []


def test_a_shards_timer_is_its_earliest_keys_but_past_the_watermark():
    """Registered again at the time that just fired, Spark deleted it once the call was done and the
    shard had no timer left: its open windows never closed, not even at a bounded run's drain (the
    demo's last two hours of left events, 8 pp of a day's match rate)."""
    from jobs.join.paced_operator import shard_timer

    assert shard_timer({("a",): 300, ("b",): 250}, 100) == 250
    assert shard_timer({("a",): 90}, 100) == 101  # an id still kept: due, but not at the timer firing now
    assert shard_timer({}, 100) is None
