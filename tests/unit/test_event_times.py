"""The paced engine's source reads a record's event time in Python (jobs/join/event_times.py) to pace
the streams before Spark parses anything: it must read the same instant Spark's parsing does
(jobs/join/records.py), or nothing, for every time format a spec can name."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from jobs.join.event_times import event_time_reader
from jobs.join.records import parse_records
from jobs.spec import Engine, SpecError, parse_spec
from jobs.spec.source import SourceFormat, UnsupportedTimeFormat, strptime_format

RAW_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"

CASES = {
    "iso": [
        "2026-11-20T10:00:00Z",
        "2026-11-20T10:00:00.123Z",
        "2026-11-20T10:00:00+02:00",
        "2026-11-20 10:00:00",  # no offset: the side's zone
        "2026-11-20T10:00:00.5",
        "yesterday",
        None,
        17,
    ],
    "epoch_ms": [1795176000123, "1795176000123", 1795176000123.0, -5, "x", 1e16, None],
    "epoch_s": [1795176000, 1795176000.25, "1795176000", 1e13],
    "epoch_us": [1795176000123456, "1795176000123456"],
    "yyyy-MM-dd HH:mm:ss": ["2026-11-20 10:00:00", "2026-11-20T10:00:00", "20/11/2026"],
    "dd/MM/yyyy'T'HH:mm:ss.SSSXXX": ["20/11/2026T10:00:00.250+01:00", "20/11/2026T10:00:00.250Z", "bad"],
}


def side_spec(demo_spec, time_format: str, time_zone: str | None):
    fmt = SourceFormat(time_format=time_format, time_zone=time_zone)
    return demo_spec.model_copy(update={"right": demo_spec.right.model_copy(update={"format": fmt})})


@pytest.mark.parametrize("time_format", list(CASES))
@pytest.mark.parametrize("time_zone", [None, "America/Chicago"])
def test_the_python_reader_reads_the_instant_spark_parses(spark, demo_spec, time_format, time_zone):
    spec = side_spec(demo_spec, time_format, time_zone)
    values = [
        json.dumps({"event_id": f"R{i}", "session_id": "s", "event_time": v, "action": "a", "position": 1})
        for i, v in enumerate(CASES[time_format])
    ]
    arrival = datetime(2026, 11, 20, 12, tzinfo=UTC)
    raw = spark.createDataFrame([(b"s", v.encode(), "t", 0, i, arrival) for i, v in enumerate(values)], RAW_SCHEMA)
    parsed = parse_records(raw, spec.right, spec).orderBy("_offset").select("event_time").collect()
    spark_ms = [None if r.event_time is None else round(r.event_time.timestamp() * 1000) for r in parsed]
    read = event_time_reader(spec.right)
    assert [read(v.encode()) for v in values] == spark_ms
    assert any(ms is not None for ms in spark_ms)


def test_datetime_patterns_map_to_strptime_and_unknown_letters_are_named():
    assert strptime_format("yyyy-MM-dd HH:mm:ss") == ("%Y-%m-%d %H:%M:%S", False)
    assert strptime_format("dd/MM/yyyy'T'HH:mm:ss.SSSXXX") == ("%d/%m/%YT%H:%M:%S.%f%z", True)
    with pytest.raises(UnsupportedTimeFormat, match="'QQ'"):
        strptime_format("yyyy QQ")


def test_a_paced_spec_refuses_what_the_engine_does_not_do_in_one_line(demo_spec):
    data = json.loads(demo_spec.model_dump_json(by_alias=True))
    data["streaming"]["engine"] = "paced"
    assert parse_spec(data).streaming.engine == Engine.paced

    with_predicate = {**data, "join": {**data["join"], "predicate": "r.position <= l.result_count"}}
    with pytest.raises(SpecError, match="does not apply join.predicate"):
        parse_spec(with_predicate)
    pattern = {**data, "right": {**data["right"], "format": {"time_format": "yyyy QQ HH:mm"}}}
    with pytest.raises(SpecError, match="cannot read right.format.time_format"):
        parse_spec(pattern)
    drift = {**data, "streaming": {**data["streaming"], "paced": {"max_drift": "0s"}}}
    with pytest.raises(SpecError, match="max_drift"):
        parse_spec(drift)
