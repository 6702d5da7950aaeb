"""A side's ``format``: JSON paths, time formats and zones, arrival from a field, ids made from
fields, and schema drift kept and counted, through the parser landing and the stream share."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from tiny_spec import tiny_spec_data

from jobs.join.records import parse_records
from jobs.spec import SpecError, parse_spec

RECORD_TS = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
RAW_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"


def spec_with(fmt: dict, *, unknown_fields: str = "keep", extra: dict | None = None):
    data = tiny_spec_data(extra=extra)
    data["right"]["format"] = fmt
    data["unknown_fields"] = unknown_fields
    return parse_spec(data)


def parse(spark, spec, values: list[dict | str | bytes]) -> list:
    rows = [
        (
            b"k",
            v if isinstance(v, bytes) else (v if isinstance(v, str) else json.dumps(v)).encode(),
            "t",
            0,
            i,
            RECORD_TS,
        )
        for i, v in enumerate(values)
    ]
    df = parse_records(spark.createDataFrame(rows, RAW_SCHEMA), spec.right, spec)
    return df.orderBy("_offset").collect()


def utc(*a) -> datetime:
    return datetime(*a, tzinfo=UTC)


def test_json_paths_read_nested_fields(spark):
    spec = spec_with({"fields": {"event_id": "$.meta.id", "k": "user.keys[1]"}})
    [r] = parse(spark, spec, [{"meta": {"id": "E1"}, "user": {"keys": ["a", "b"]}, "t": "2026-11-20T11:59:00Z"}])
    assert (r.event_id, r.k, r._reason, r._drift) == ("E1", "b", None, None)


@pytest.mark.parametrize(
    "fmt,written,expected",
    [
        ({"time_format": "epoch_s"}, 1795175940, utc(2026, 11, 20, 11, 59)),
        ({"time_format": "epoch_s"}, "1795175940.5", utc(2026, 11, 20, 11, 59, 0, 500000)),
        ({"time_format": "epoch_ms"}, 1795175940123, utc(2026, 11, 20, 11, 59, 0, 123000)),
        ({"time_format": "epoch_us"}, 1795175940123456, utc(2026, 11, 20, 11, 59, 0, 123456)),
        ({"time_format": "yyyy-MM-dd HH:mm:ss", "time_zone": "America/Chicago"}, "2026-11-20 05:59:00",
         utc(2026, 11, 20, 11, 59)),
        ({"time_format": "dd/MM/yyyy HH:mm"}, "20/11/2026 11:59", utc(2026, 11, 20, 11, 59)),
        ({"time_zone": "Europe/Berlin"}, "2026-11-20T12:59:00", utc(2026, 11, 20, 11, 59)),  # naive ISO: the zone
        ({"time_zone": "Europe/Berlin"}, "2026-11-20T11:59:00Z", utc(2026, 11, 20, 11, 59)),  # an offset wins
        ({"time_zone": "Europe/Berlin"}, "2026-11-20T06:59:00-05:00", utc(2026, 11, 20, 11, 59)),
        ({}, "2026-11-20 11:59:00", utc(2026, 11, 20, 11, 59)),  # the default: ISO, naive is UTC
    ],
)  # fmt: skip
def test_time_formats_and_zones(spark, fmt, written, expected):
    [r] = parse(spark, spec_with(fmt), [{"event_id": "E", "k": "a", "t": written}])
    assert r._reason is None and r.t.replace(tzinfo=UTC) == expected


@pytest.mark.parametrize("written", ["yesterday", "1e30", "", "2026-13-45 99:99:99"])
def test_a_time_that_does_not_parse_is_quarantined_not_guessed(spark, written):
    for fmt in ({"time_format": "epoch_ms"}, {"time_format": "yyyy-MM-dd HH:mm:ss"}, {}):
        [r] = parse(spark, spec_with(fmt), [{"event_id": "E", "k": "a", "t": written}])
        assert (r._reason, r.t) == ("bad_event_time", None), (fmt, written)


def test_arrival_from_a_field_sets_ds_and_validity(spark):
    spec = spec_with({"time_format": "epoch_ms", "arrival": "$.received_at"})
    ms = int(utc(2026, 11, 20, 23, 59, 59).timestamp() * 1000)
    early = int(utc(2026, 11, 20, 0, 10).timestamp() * 1000)  # 12 h from the record ts, its day: kept
    rows = parse(
        spark,
        spec,
        [
            {"event_id": "A", "k": "a", "t": ms - 1000, "received_at": ms},  # record ts says noon, the field 23:59
            {"event_id": "B", "k": "a", "t": ms},  # no arrival field
            {"event_id": "C", "k": "a", "t": ms - 8 * 86_400_000, "received_at": ms},  # older than max_past (7d)
            # a day after the record ts's: landing 11-21 reads record timestamps from 11-20 23:00 (the
            # slack) and 11-20 keeps only its own arrivals: no day landed it, and nothing counted it
            {"event_id": "D", "k": "a", "t": ms, "received_at": ms + 86_400_000},
            {"event_id": "E", "k": "a", "t": early - 1000, "received_at": early},
        ],
    )
    assert rows[0]._reason is None and rows[0]._arrival_time.replace(tzinfo=UTC) == utc(2026, 11, 20, 23, 59, 59)
    assert str(rows[0].ds) == "2026-11-20"
    assert (rows[1]._reason, str(rows[1].ds)) == ("bad_arrival_time", "2026-11-20")  # ds from the record ts
    assert rows[2]._reason == "event_time_too_old"
    assert (rows[3]._reason, str(rows[3].ds)) == ("arrival_outside_slack", "2026-11-20")  # its record ts's day
    assert rows[4]._reason is None and str(rows[4].ds) == "2026-11-20"  # the same day: landed with it


def test_an_id_made_from_fields_is_stable_and_tells_records_apart(spark):
    spec = spec_with({"id_from": ["k", "t", "who"]}, extra={"who": "string"})
    a = {"k": "a", "t": "2026-11-20T11:59:00Z", "who": "d1"}
    rows = parse(spark, spec, [a, {**a, "who": "d2"}, a, {"k": "a", "t": "2026-11-20T11:59:00Z"}])
    ids = [r.event_id for r in rows]
    assert all(r._reason is None for r in rows) and len(ids[0]) == 32
    assert ids[0] == ids[2] and len({ids[0], ids[1], ids[3]}) == 3  # a missing field is not an empty one


def test_an_added_field_is_kept_and_counted_by_default_quarantined_when_asked(spark):
    rec = {"event_id": "E", "k": "a", "t": "2026-11-20T11:59:00Z", "app_version": "7.1", "os": "ios"}
    [kept] = parse(spark, spec_with({}), [rec])
    assert kept._reason is None and sorted(kept._drift.split(",")) == ["app_version", "os"]
    [q] = parse(spark, spec_with({}, unknown_fields="quarantine"), [rec])
    assert q._reason == "unexpected_field"
    [ignored] = parse(spark, spec_with({}, unknown_fields="ignore"), [rec])
    assert (ignored._reason, ignored._drift) == (None, None)
    spec = spec_with({"fields": {"k": "$.user.k"}})  # a mapped path's top-level key is known
    [r] = parse(spark, spec, [{"event_id": "E", "user": {"k": "a", "new": 1}, "t": "2026-11-20T11:59:00Z"}])
    assert (r.k, r._drift) == ("a", None)


@pytest.mark.parametrize(
    "fmt,named",
    [
        ({"fields": {"nope": "$.x"}}, "column 'nope' is not in schema"),
        ({"fields": {"k": "$..x"}}, "is not a JSON path"),
        ({"time_format": "fortnights"}, "use iso, epoch_s"),
        ({"time_zone": "Mars/Olympus"}, "not an IANA time zone"),
        ({"arrival": "when it came"}, "record_timestamp or a JSON path"),
        ({"id_from": ["event_id"]}, "cannot be made from itself"),
        ({"id_from": ["k"], "fields": {"event_id": "$.id"}}, "do not also map it"),
        ({"colour": "red"}, "unknown field"),
    ],
)
def test_a_bad_format_names_the_field(fmt, named):
    data = tiny_spec_data()
    data["right"]["format"] = fmt
    with pytest.raises(SpecError, match=r"  right[.:]") as exc:
        parse_spec(data)
    assert named in str(exc.value) and "format" in str(exc.value)


def test_avro_values_parse_like_json_and_one_that_does_not_decode_is_quarantined_with_its_bytes(spark, tmp_path):
    import base64
    import io
    import struct

    import fastavro

    schema = {
        "type": "record",
        "name": "Tiny",
        "fields": [
            {"name": "meta", "type": {"type": "record", "name": "Meta", "fields": [{"name": "id", "type": "string"}]}},
            {"name": "k", "type": ["null", "string"], "default": None},
            {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    (tmp_path / "tiny.avsc").write_text(json.dumps(schema))
    avro = {"schema": str(tmp_path / "tiny.avsc"), "framing": "confluent", "schemas": {3: str(tmp_path / "tiny.avsc")}}
    spec = spec_with({"encoding": "avro", "avro": avro, "fields": {"event_id": "$.meta.id"}})

    def framed(record: dict, schema_id: int = 3) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, spec.right.format.avro.writer_schema, record)
        return struct.pack(">bi", 0, schema_id) + out.getvalue()

    good = framed({"meta": {"id": "E1"}, "k": "a", "t": 1795175940123456})
    no_key = framed({"meta": {"id": "E2"}, "t": 1795175940123456})  # k null: the checks after decoding apply
    bad = [b'{"event_id": "E3"}', framed({"meta": {"id": "E4"}, "t": 0}, 9), good[:-4]]
    rows = parse(spark, spec, [good, no_key, *bad])
    assert (rows[0]._reason, rows[0].event_id, rows[0].k, rows[0]._drift) == (None, "E1", "a", None)
    assert rows[0].t.replace(tzinfo=UTC) == utc(2026, 11, 20, 11, 59, 0, 123456)  # timestamp-micros: an ISO time
    assert (rows[1]._reason, rows[1].event_id) == ("null_key", "E2")
    assert [(r._reason, r._detail.split(":")[0]) for r in rows[2:]] == [
        ("malformed_avro", "magic byte 0x7b, not 0x00"),
        ("malformed_avro", "schema id 9 not in avro.schemas (3)"),
        ("malformed_avro", "truncated"),
    ]
    assert [base64.b64decode(r._raw_value) for r in rows[2:]] == bad  # the bytes, not a lossy text


def test_the_default_format_is_joinshifts_own():
    spec = parse_spec(tiny_spec_data())
    assert spec.right.format.arrival_field is None and spec.right.format.time_format == "iso"
    assert spec.unknown_fields.value == "keep"
    assert timedelta(hours=1) == spec.right.format.arrival_slack


def filter_conditions(df) -> list[str]:
    """The conditions of the filters in ``df``'s executed plan, in full (a plan's text elides)."""
    out, nodes = [], [df._jdf.queryExecution().executedPlan()]
    while nodes:
        node = nodes.pop()
        if node.nodeName() == "Filter":
            out.append(node.condition().toString())
        children = node.children()
        nodes += [children.apply(i) for i in range(children.size())]
    return out


@pytest.mark.parametrize(
    "fmt",
    [{}, {"fields": {"event_id": "$.meta.id", "k": "user.keys[1]"}, "time_format": "epoch_ms", "arrival": "$.at"}],
    ids=["top-level fields", "nested paths and an arrival field"],
)
def test_the_good_and_the_bad_records_read_each_json_value_once(spark, fmt):
    """Spark moves a filter below the projection it tests and copies the projected expressions
    into it: unguarded, the good-record filter parsed each value ~10 times (SPARK-47672), and the
    event time's text four times (the checks test it three times)."""
    from jobs.join.records import good_events, quarantine_rows

    spec = spec_with(fmt)
    raw = spark.createDataFrame([(b"k", b"{}", "t", 0, 0, RECORD_TS)], RAW_SCHEMA)
    parsed = parse_records(raw, spec.right, spec)
    for df in (good_events(parsed, spec.right), quarantine_rows(parsed, spec.right, "stream")):
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert plan.count("from_json(") == 1, plan
        assert plan.count("get_json_object(") == len(fmt.get("fields", {})) + ("arrival" in fmt), plan
        # what the filter tests is computed below it, each value once: it copies no parse or lookup
        copied = [c for c in filter_conditions(df) if re.search(r"try_cast\(|from_json\(|get_json_object\(|#\d+\[", c)]
        assert filter_conditions(df) and not copied, copied


def test_a_key_written_but_not_of_its_type_is_a_bad_type_not_a_missing_key(spark):
    """A key that does not cast was quarantined as null_key, which sends its owner looking for a missing field."""
    data = tiny_spec_data()
    data["left"]["schema"]["k"] = data["right"]["schema"]["k"] = "long"
    spec = parse_spec(data)
    rows = parse(
        spark,
        spec,
        [
            {"event_id": "A", "k": "abc", "t": "2026-11-20T11:59:00Z"},
            {"event_id": "B", "t": "2026-11-20T11:59:00Z"},
            {"event_id": "C", "k": 7, "t": "2026-11-20T11:59:00Z"},
        ],
    )
    assert [(r._reason, r._detail) for r in rows] == [("bad_type", "k"), ("null_key", "k"), (None, None)]
