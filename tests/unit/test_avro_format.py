"""A side's Avro values (``format.encoding: avro``): the spec's ``avro`` section, decoding a value
into the JSON its JSON paths read (logical types, Confluent framing, schema ids by file), why a
value does not decode, encoding for ``joinshift import``, and the restart plan. No Spark here."""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import fastavro
import pytest
import yaml
from tiny_spec import tiny_spec_data

from jobs.join.avro import NotAvro, decode, decode_or_why, encode, encode_or_why, record_json
from jobs.spec import SpecError, load_spec, parse_spec, recorded_spec, write_spec
from jobs.spec.plan import REUSE, REUSE_OK, REUSE_WARN, plan

BYOD = Path(__file__).resolve().parents[1] / "data" / "byod"
V1, V2 = BYOD / "ride_request_v1.avsc", BYOD / "ride_request_v2.avsc"

NULL_INT = ["null", "int"]
TINY = {
    "type": "record",
    "name": "Tiny",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "k", "type": ["null", "string"], "default": None},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def avsc(folder: Path, name: str, schema: object) -> Path:
    path = folder / name
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return path


def spec_with(avro: dict, **fmt):
    data = tiny_spec_data()
    data["right"]["format"] = {"encoding": "avro", "avro": avro, **fmt}
    return parse_spec(data)


def rides(avro: dict):
    """The tiny spec's right side reading ride requests (the BYOD data set's records)."""
    data = tiny_spec_data()
    data["right"]["format"] = {"encoding": "avro", "avro": avro, "fields": {"event_id": "$.request.id"}}
    return parse_spec(data).right.format.avro


def framed(schema_id: int, payload: bytes) -> bytes:
    return struct.pack(">bi", 0, schema_id) + payload


def payload(schema_file: Path, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(schema_file.read_text())), record)
    return out.getvalue()


REQUEST = {
    "request": {"id": "rq-1", "rider": "u1"},
    "requested_at": 1795175940123,
    "received_at": 1795175941000,
    "city": "chicago",
}

# ------------------------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    "avro,fmt,named",
    [
        ({"schema": "missing.avsc"}, {}, "missing.avsc does not exist"),
        ({"schema": "not_json.avsc"}, {}, "not_json.avsc is not JSON"),
        ({"schema": "bad_type.avsc"}, {}, "bad_type.avsc is not an Avro schema: UnknownType: strin"),
        ({"schema": "a_string.avsc"}, {}, "a_string.avsc: the writer schema must be a record with fields (got 'str"),
        ({"schema": "tiny.avsc", "framing": "magic"}, {}, "framing: Input should be 'none' or 'confluent'"),
        ({"schema": "tiny.avsc", "schemas": {1: "tiny.avsc"}}, {}, "only a Confluent-framed value names its schema id"),
        ({"schema": "tiny.avsc", "framing": "confluent", "schemas": {1: "other.avsc"}}, {}, "none of schemas' files"),
        ({"schema": "tiny.avsc", "framing": "confluent", "schemas": {1: "tiny.avsc", 2: "gone.avsc"}}, {},
         "schemas.2: /"),
        ({"schema": "tiny.avsc", "framing": "confluent", "schemas": {-1: "tiny.avsc"}}, {}, "schema id -1: a regis"),
        ({"schema": "tiny.avsc", "registry": "http://r:8081"}, {}, "unknown field; allowed: schema, framing, schemas"),
        (None, {}, "encoding avro needs the writer schema"),
        ({"schema": "tiny.avsc"}, {"encoding": "json"}, "avro is read only with encoding: avro"),
        ({"schema": "tiny.avsc"}, {"encoding": "protobuf"}, "encoding: Input should be 'json' or 'avro'"),
    ],
)  # fmt: skip
def test_a_bad_avro_section_is_one_line_naming_the_field_and_the_file(tmp_path, monkeypatch, avro, fmt, named):
    monkeypatch.chdir(tmp_path)  # a spec validated from a mapping: paths are relative to the current directory
    avsc(tmp_path, "tiny.avsc", TINY)
    avsc(tmp_path, "other.avsc", {**TINY, "name": "Other"})
    avsc(tmp_path, "not_json.avsc", "{'type': 'record'")
    avsc(tmp_path, "bad_type.avsc", {**TINY, "fields": [{"name": "a", "type": "strin"}]})
    avsc(tmp_path, "a_string.avsc", '"string"')
    data = tiny_spec_data()
    data["right"]["format"] = {"encoding": "avro", **({"avro": avro} if avro is not None else {}), **fmt}
    with pytest.raises(SpecError) as exc:
        parse_spec(data)
    [line] = [ln for ln in str(exc.value).splitlines() if ln.startswith("  right.format")]
    assert named in line, line
    if "avsc" in named:
        assert str(tmp_path) in line  # the file, resolved: which one to fix


def test_schema_paths_are_relative_to_the_spec_files_folder_and_kept_absolute(tmp_path, monkeypatch):
    folder = tmp_path / "specs"
    (folder / "schemas").mkdir(parents=True)
    avsc(folder / "schemas", "tiny.avsc", TINY)
    data = tiny_spec_data()
    data["right"]["format"] = {"encoding": "avro", "avro": {"schema": "schemas/tiny.avsc"}}
    (folder / "tiny.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)  # not the spec's folder
    spec = load_spec(folder / "tiny.yaml")
    assert spec.right.format.avro.schema_ == str(folder / "schemas" / "tiny.avsc")
    assert spec.right.format.avro.writer_schema["name"] == "Tiny"

    elsewhere = write_spec(spec, tmp_path / "copy" / "tiny.yaml")  # the absolute path travels with the spec
    assert load_spec(elsewhere) == spec

    (folder / "schemas" / "tiny.avsc").unlink()  # a checkpoint's record is compared, not run: files not read
    recorded = recorded_spec(spec.model_dump_json(by_alias=True))
    assert recorded.model_dump() == spec.model_dump() and not plan(recorded, spec).changes
    with pytest.raises(SpecError, match="tiny.avsc does not exist"):
        load_spec(elsewhere)


def test_the_id_confluent_import_writes_is_the_one_schema_is_listed_under():
    avro = rides({"schema": str(V2), "framing": "confluent", "schemas": {1: str(V1), 2: str(V2)}})
    assert avro.write_id == 2 and avro.schema_for(1)["fields"][-1]["name"] == "city"
    assert avro.schema_for(7) is None
    anything = rides({"schema": str(V1), "framing": "confluent"})  # no schemas: every id decodes with schema
    assert anything.write_id is None and anything.schema_for(7) is anything.writer_schema


# ------------------------------------------------------------------------------ decoding


def test_logical_types_come_out_as_the_json_a_format_reads(tmp_path):
    schema = {
        "type": "record",
        "name": "All",
        "fields": [
            {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "fare", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
            {"name": "trip", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "blob", "type": "bytes"},
            {"name": "hash", "type": {"type": "fixed", "name": "H", "size": 2}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["pool", "solo"]}},
            {"name": "stops", "type": {"type": "array", "items": "string"}},
            {"name": "tags", "type": {"type": "map", "values": "long"}},
            {"name": "epoch", "type": "long"},
            {"name": "gone", "type": ["null", "string"]},
            {"name": "nested", "type": {"type": "record", "name": "N", "fields": [{"name": "x", "type": NULL_INT}]}},
        ],
    }  # fmt: skip
    spec = spec_with({"schema": str(avsc(tmp_path, "all.avsc", schema))})
    avro = spec.right.format.avro
    record = {
        "ms": datetime(2026, 11, 20, 11, 59, 0, 123000, tzinfo=UTC),
        "us": 1795175940123456,
        "local": datetime(2026, 11, 20, 5, 59),
        "day": date(2026, 11, 20),
        "fare": Decimal("12.34"),
        "trip": UUID("12345678-1234-5678-1234-567812345678"),
        "blob": b"\x00\xff",
        "hash": b"ab",
        "kind": "pool",
        "stops": ["a", "b"],
        "tags": {"x": 1},
        "epoch": 1795175940123,
        "gone": None,
        "nested": {"x": None},
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, avro.writer_schema, record)
    assert json.loads(decode(out.getvalue(), avro)) == {
        "ms": "2026-11-20T11:59:00.123000+00:00",  # an offset: time_format iso reads it as is
        "us": "2026-11-20T11:59:00.123456+00:00",
        "local": "2026-11-20T05:59:00",  # no offset: format.time_zone applies
        "day": "2026-11-20",
        "fare": "12.34",
        "trip": "12345678-1234-5678-1234-567812345678",
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "hash": base64.b64encode(b"ab").decode(),
        "kind": "pool",
        "stops": ["a", "b"],
        "tags": {"x": 1},
        "epoch": 1795175940123,  # a plain long stays a number: time_format epoch_ms
        "nested": {"x": None},  # a top-level null is left out ("gone"), a nested one kept
    }


def test_two_registry_ids_decode_records_before_and_after_a_field_was_added():
    avro = rides({"schema": str(V2), "framing": "confluent", "schemas": {1: str(V1), 2: str(V2)}})
    old = framed(1, payload(V1, REQUEST))
    new = framed(2, payload(V2, {**REQUEST, "app_version": "7.1"}))
    assert json.loads(decode(old, avro)) == {
        "request": {"id": "rq-1", "rider": "u1"},
        "requested_at": "2026-11-20T11:59:00.123000+00:00",
        "received_at": "2026-11-20T11:59:01+00:00",
        "city": "chicago",
    }
    assert json.loads(decode(new, avro))["app_version"] == "7.1"
    assert "app_version" not in json.loads(decode(framed(2, payload(V2, REQUEST)), avro))  # null: not drift
    assert decode(encode({**REQUEST, "app_version": "7.1"}, avro), avro) == decode(new, avro)  # import writes id 2


@pytest.mark.parametrize(
    "value,why",
    [
        (json.dumps(REQUEST).encode(), "magic byte 0x7b, not 0x00: not Confluent-framed"),
        (framed(7, payload(V1, REQUEST)), "schema id 7 not in avro.schemas (1, 2)"),
        (framed(1, payload(V1, REQUEST))[:-3], "truncated: the payload ends inside the record (schema id 1)"),
        (framed(1, payload(V1, REQUEST))[:12], "truncated: the payload ends inside the record (schema id 1)"),
        (b"\x00\x00\x01", "truncated: 3 bytes, a Confluent header is 5"),
        (framed(1, payload(V2, {**REQUEST, "app_version": "7.1"})), "after the record: not written with schema id 1?"),
        (framed(2, b"\x02a\x08"), "does not decode with schema id 2: list index out of range"),  # union branch 4
        (None, "no value (null)"),
    ],
)  # fmt: skip
def test_a_value_that_does_not_decode_says_why(value, why):
    avro = rides({"schema": str(V2), "framing": "confluent", "schemas": {1: str(V1), 2: str(V2)}})
    with pytest.raises(NotAvro) as exc:
        decode(value, avro)
    assert why in str(exc.value)
    assert decode_or_why(value, avro) == (None, str(exc.value))


def test_an_unframed_value_is_the_bare_payload():
    avro = rides({"schema": str(V1)})
    value = payload(V1, REQUEST)
    assert encode(REQUEST, avro) == value and json.loads(decode(value, avro))["city"] == "chicago"
    assert "truncated" in decode_or_why(value[:-2], avro)[1]
    assert decode_or_why(b"", avro)[1].startswith("truncated")


def test_import_needs_a_record_that_fits_and_an_id_to_frame_with():
    avro = rides({"schema": str(V2), "framing": "confluent", "schemas": {1: str(V1), 2: str(V2)}})
    assert encode_or_why(json.dumps({**REQUEST, "extra": 1}), avro)[0] == encode(REQUEST, avro)  # extra: left out
    value, why = encode_or_why(json.dumps({**REQUEST, "requested_at": "2026-11-20T11:59:00Z"}), avro)
    assert value is None and "requested_at" in why  # a text time for a timestamp-millis long
    assert encode_or_why(json.dumps({"city": "x"}), avro)[1] == "ValueError: no value and no default for request"
    no_id = rides({"schema": str(V2), "framing": "confluent"})
    with pytest.raises(ValueError, match=r"list the writer schema under it in avro.schemas"):
        encode(REQUEST, no_id)


def test_record_json_is_compact_and_keeps_text_as_is():
    assert record_json({"a": "é", "b": None, "c": [None]}) == '{"a":"é","c":[null]}'


# ------------------------------------------------------------------------------ the restart plan


def test_changing_the_encoding_or_a_schema_warns_adding_an_id_does_not(tmp_path):
    base = tiny_spec_data()
    avsc(tmp_path, "v1.avsc", TINY)
    avsc(
        tmp_path,
        "v2.avsc",
        {**TINY, "fields": [*TINY["fields"], {"name": "x", "type": ["null", "long"], "default": None}]},
    )
    avro = {"schema": str(tmp_path / "v1.avsc"), "framing": "confluent", "schemas": {1: str(tmp_path / "v1.avsc")}}

    def with_avro(a: dict | None) -> dict:
        d = copy.deepcopy(base)
        if a is not None:
            d["left"]["format"] = {"encoding": "avro", "avro": a}
        return d

    def effects(old: dict, new: dict) -> dict[str, str]:
        result = plan(parse_spec(old), parse_spec(new))
        assert result.action == REUSE
        return {c.field: c.effect for c in result.changes}

    assert effects(with_avro(None), with_avro(avro)) == {
        "left.format.encoding": REUSE_WARN,
        "left.format.avro": REUSE_WARN,
    }
    added = {**avro, "schema": str(tmp_path / "v2.avsc"), "schemas": {1: avro["schema"], 2: str(tmp_path / "v2.avsc")}}
    assert effects(with_avro(avro), with_avro(added)) == {
        "left.format.avro.schema": REUSE_WARN,
        "left.format.avro.schemas.2": REUSE_OK,
    }
    assert effects(with_avro(added), with_avro({**added, "framing": "none", "schemas": {}})) == {
        "left.format.avro.framing": REUSE_WARN,
        "left.format.avro.schemas.1": REUSE_WARN,
        "left.format.avro.schemas.2": REUSE_WARN,
    }
    change = plan(parse_spec(with_avro(avro)), parse_spec(with_avro(None))).changes[0]
    assert change.field == "left.format.encoding" and "malformed_avro" in change.reason
