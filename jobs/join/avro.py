"""Avro values to the JSON text of their record, and back: pure functions, and their Spark columns.

:func:`decode` turns one Kafka value into the JSON of its record, so a side with
``format.encoding: avro`` is parsed by the same JSON paths, time formats and checks as a JSON side
(:func:`jobs.join.records.parse_records` applies :func:`decoded` first). The writer schema comes
from the spec's ``format.avro`` (:mod:`jobs.spec.avro`): no schema registry is asked.

JSON of a decoded record (:func:`record_json`): ``timestamp-*`` logical types as ISO-8601 with
their offset (``2026-11-20T11:59:00.123000+00:00``), ``local-timestamp-*`` without one, dates and
times in ISO, bytes and fixed as base64, decimals and UUIDs as text; top-level fields whose value
is null are left out (a field added by a newer schema is then schema drift only where it is set).

A value that does not decode raises :class:`NotAvro` with why: ``magic byte 0x7b`` (not
Confluent-framed), ``schema id 7 not in avro.schemas``, ``truncated``, ``3 bytes after the
record`` (written with another schema?), ...; the parser quarantines it as ``malformed_avro``.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any
from uuid import UUID

import fastavro
import pandas as pd
from pyspark.sql import Column
from pyspark.sql.functions import pandas_udf

from jobs.spec.avro import CONFLUENT_HEADER, CONFLUENT_MAGIC, AvroFormat, Framing

#: The decoded column: the record's JSON, or null and why it did not decode.
DECODED = "json string, error string"
#: The encoded column (``joinshift import``): the framed value, or null and why it could not be written.
ENCODED = "value binary, error string"


class NotAvro(ValueError):
    """A value that does not decode with the side's writer schema(s); the message says why."""


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, Decimal | UUID):
        return str(v)
    raise TypeError(f"{type(v).__name__} is not a JSON value")


def record_json(record: dict[str, Any]) -> str:
    """A decoded record as JSON text (module doc); top-level nulls left out."""
    kept = {k: v for k, v in record.items() if v is not None}
    return json.dumps(kept, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def _payload(value: bytes, avro: AvroFormat) -> tuple[memoryview, dict[str, Any], str]:
    """(payload, writer schema, its name for messages) of one value, or :class:`NotAvro`."""
    if avro.framing == Framing.none:
        return memoryview(value), avro.writer_schema, "the writer schema"
    if len(value) < CONFLUENT_HEADER:
        raise NotAvro(f"truncated: {len(value)} bytes, a Confluent header is {CONFLUENT_HEADER}")
    if value[0] != CONFLUENT_MAGIC:
        raise NotAvro(f"magic byte 0x{value[0]:02x}, not 0x00: not Confluent-framed")
    (schema_id,) = struct.unpack(">i", value[1:CONFLUENT_HEADER])
    schema = avro.schema_for(schema_id)
    if schema is None:
        raise NotAvro(f"schema id {schema_id} not in avro.schemas ({', '.join(map(str, avro.schemas))})")
    return memoryview(value)[CONFLUENT_HEADER:], schema, f"schema id {schema_id}"


def decode(value: bytes | bytearray | None, avro: AvroFormat) -> str:
    """One Kafka value -> the JSON text of its record; :class:`NotAvro` when it does not decode."""
    if value is None:
        raise NotAvro("no value (null)")
    payload, schema, which = _payload(bytes(value), avro)
    buf = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(buf, schema, None)
    except EOFError:
        raise NotAvro(f"truncated: the payload ends inside the record ({which})") from None
    except IndexError as exc:  # fastavro's reader indexes past the end of a short buffer
        if "string index" in str(exc):
            raise NotAvro(f"truncated: the payload ends inside the record ({which})") from None
        raise NotAvro(f"does not decode with {which}: {exc}") from None
    except Exception as exc:  # a bad union index, invalid UTF-8, ...: whatever fastavro raises
        raise NotAvro(f"does not decode with {which}: {type(exc).__name__}: {exc}"[:300]) from None
    left = len(payload) - buf.tell()
    if left:
        raise NotAvro(f"{left} bytes after the record: not written with {which}?")
    if not isinstance(record, dict):
        raise NotAvro(f"{which} is not a record")
    return record_json(record)


def decode_or_why(value: bytes | bytearray | None, avro: AvroFormat) -> tuple[str | None, str | None]:
    """``(json, None)`` for a value that decodes, ``(None, why)`` for one that does not."""
    try:
        return decode(value, avro), None
    except NotAvro as exc:
        return None, str(exc)


def encode(record: dict[str, Any], avro: AvroFormat) -> bytes:
    """A record (a JSON object's values) as a value of the side's topic: written with ``schema``,
    framed with its registry id under ``framing: confluent`` (which needs ``schemas`` to name it).
    ``ValueError`` when the record does not fit the schema (a missing field, a wrong type)."""
    out = io.BytesIO()
    if avro.framing == Framing.confluent:
        if avro.write_id is None:
            raise ValueError(
                "confluent framing writes the schema's registry id: list the writer schema under it in "
                "avro.schemas, e.g. {1: <schema file>}"
            )
        out.write(struct.pack(">bi", CONFLUENT_MAGIC, avro.write_id))
    fastavro.schemaless_writer(out, avro.writer_schema, record)
    return out.getvalue()


def encode_or_why(text: str | None, avro: AvroFormat) -> tuple[bytes | None, str | None]:
    """A JSON object's text -> ``(value, None)``, or ``(None, why)`` when it does not fit."""
    try:
        record = json.loads(text) if text is not None else None
        if not isinstance(record, dict):
            return None, "not a JSON object"
        return encode(record, avro), None
    except Exception as exc:  # fastavro's writer raises ValueError, TypeError, ... naming the field
        return None, f"{type(exc).__name__}: {exc}"[:300]


def decoded(value: Column, avro: AvroFormat) -> Column:
    """A binary column of Avro values -> struct ``(json, error)`` (:data:`DECODED`), per row
    :func:`decode_or_why`. Runs in Python on the executors (fastavro, pandas, pyarrow)."""

    @pandas_udf(DECODED)  # type: ignore[call-overload]
    def _decode(values: pd.Series) -> pd.DataFrame:
        return pd.DataFrame([decode_or_why(v, avro) for v in values], columns=["json", "error"], dtype=object)

    return _decode(value)


def encoded(text: Column, avro: AvroFormat) -> Column:
    """A string column of JSON objects -> struct ``(value, error)`` (:data:`ENCODED`), per row
    :func:`encode_or_why`."""

    @pandas_udf(ENCODED)  # type: ignore[call-overload]
    def _encode(texts: pd.Series) -> pd.DataFrame:
        return pd.DataFrame([encode_or_why(t, avro) for t in texts], columns=["value", "error"], dtype=object)

    return _encode(text)
