"""Record parsing: every bad-record class gets its reason, good records parse to their types."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from jobs.join.records import good_events, quarantine_rows
from jobs.steps.landing import land_records

ARRIVAL = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
RAW_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"


def payload(**over):
    p = {
        "event_id": "R1",
        "session_id": "s1",
        "event_time": "2026-11-20T11:59:00.000Z",
        "action": "click",
        "position": 3,
    }
    p.update(over)
    return json.dumps({k: v for k, v in p.items() if v is not ...})


def raw_frame(spark, values, arrival=ARRIVAL):
    rows = [
        (b"s1", v.encode() if isinstance(v, str) else v, "search_clicks", 0, i, arrival + timedelta(seconds=i))
        for i, v in enumerate(values)
    ]
    return spark.createDataFrame(rows, RAW_SCHEMA)


def test_each_bad_class_is_quarantined_with_its_reason_and_raw_payload(spark, demo_spec):
    spec = demo_spec
    cases = [
        ("good", payload(event_id="G1"), None),
        ("not json", "{not json", "malformed_json"),
        ("json array", "[1, 2]", "malformed_json"),
        ("null id", payload(event_id=None), "null_id"),
        ("null key", payload(event_id="N1", session_id=None), "null_key"),
        ("missing key", payload(event_id="N2", session_id=...), "null_key"),
        ("bad time", payload(event_id="T1", event_time="yesterday"), "bad_event_time"),
        ("bad type", payload(event_id="B1", position="abc"), "bad_type"),
        ("drift", json.dumps({**json.loads(payload(event_id="U1")), "new_col": 1}), "unexpected_field"),
        ("too old", payload(event_id="O1", event_time="2026-11-17T11:59:00.000Z"), "event_time_too_old"),
        ("future", payload(event_id="F1", event_time="2026-11-20T14:00:00.000Z"), "event_time_in_future"),
        ("duplicate", payload(event_id="G1"), "duplicate_event_id"),
    ]
    parsed = land_records(raw_frame(spark, [c[1] for c in cases]), spec.right, spec).cache()
    got = {r["_offset"]: (r["_reason"], r["_detail"]) for r in parsed.select("_offset", "_reason", "_detail").collect()}
    assert {cases[o][0]: got[o][0] for o in got} == {c[0]: c[2] for c in cases}
    assert got[7] == ("bad_type", "position")
    assert got[8] == ("unexpected_field", "new_col")

    q = quarantine_rows(parsed, spec.right, "landing").orderBy("offset").collect()
    assert len(q) == len(cases) - 1  # nothing vanishes
    assert q[0].raw_value == "{not json" and q[0].topic == "search_clicks" and q[0].stage == "landing"
    good = good_events(parsed, spec.right)
    assertDataFrameEqual(
        good.select("event_id", "position", "event_time"),
        [Row(event_id="G1", position=3, event_time=datetime(2026, 11, 20, 11, 59, tzinfo=UTC).replace(tzinfo=None))],
    )
    assert str(good.first().ds) == "2026-11-20"


def test_a_known_field_written_twice_is_not_an_unknown_one(spark, demo_spec):
    # JSON allows a name twice; the parsed map keeps both keys, so a count of its keys alone would
    # take the second for an unknown field
    twice = payload(event_id="D1")[:-1] + ', "position": 4}'
    drift = json.dumps({**json.loads(payload(event_id="D2")), "new_col": 1, "other": 2})
    parsed = land_records(raw_frame(spark, [twice, drift]), demo_spec.right, demo_spec)
    assertDataFrameEqual(
        parsed.select("event_id", "position", "_reason", "_detail"),
        [
            Row(event_id="D1", position=3, _reason=None, _detail=None),
            Row(event_id="D2", position=3, _reason="unexpected_field", _detail="new_col,other"),
        ],
    )


def test_duplicates_of_yesterdays_ids_are_caught(spark, demo_spec):
    seen = spark.createDataFrame([("G1",)], "event_id string")
    parsed = land_records(
        raw_frame(spark, [payload(event_id="G1"), payload(event_id="G2")]), demo_spec.right, demo_spec, seen
    )
    assertDataFrameEqual(
        parsed.select("event_id", "_reason"),
        [Row(event_id="G1", _reason="duplicate_event_id"), Row(event_id="G2", _reason=None)],
    )


def test_unknown_fields_can_be_ignored_by_the_spec(spark, demo_spec):
    lenient = demo_spec.model_copy(update={"unknown_fields": "ignore"})
    value = json.dumps({**json.loads(payload()), "new_col": 1})
    parsed = land_records(raw_frame(spark, [value]), demo_spec.right, lenient)
    assertDataFrameEqual(parsed.select("_reason"), [Row(_reason=None)])
