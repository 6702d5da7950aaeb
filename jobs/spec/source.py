"""How one side's Kafka records are read: where each column sits in the value, how times are
written, what the arrival time is, and how an id is made when the data has none.

A stream spec's ``format`` section; its defaults are joinshift's own format (a flat JSON object
whose keys are the schema's columns, ISO-8601 times, arrival = the Kafka record timestamp)::

    format:
      fields:                      # column -> JSON path in the value (default: the column's name)
        session_id: $.session.id
        event_time: $.ts
      time_format: epoch_ms        # iso | epoch_s | epoch_ms | epoch_us | a pattern (yyyy-MM-dd HH:mm:ss)
      time_zone: America/Chicago   # the zone of times written without an offset (default UTC)
      arrival: record_timestamp    # or a JSON path: $.received_at (read with time_format)
      arrival_slack: 1h            # with an arrival field: how far the record timestamp may be from it
      id_from: [session_id, event_time, position]   # the id column is a hash of these (no id in the data)
      encoding: json               # or avro: the value is Avro, decoded to the same JSON first
      avro: {schema: v2.avsc, framing: confluent, schemas: {1: v1.avsc, 2: v2.avsc}}   # see jobs.spec.avro

The Kafka record timestamp is what the topic stores: the producer's clock (CreateTime, most
topics) or the broker's append time (``message.timestamp.type=LogAppendTime``). Arrival decides
the ds a record lands in, its validity (``timestamp_validity``) and the replay order, so point
``arrival`` at a field when the producer's clock is not the time the event reached you.

An Avro value (``encoding: avro``) is decoded into the JSON text of its record before anything
else reads it, so ``fields``, ``time_format``, ``arrival`` and ``id_from`` mean the same for both
encodings: the record's fields are the JSON's keys, nested records nested objects. Avro's
``timestamp-millis``/``-micros`` come out as ISO-8601 times with an offset (``time_format: iso``
reads them), ``local-timestamp-*`` without one (``time_zone`` applies), ``date`` as ``2026-11-20``;
a plain ``long`` time is a number (``epoch_ms`` etc.). Bytes and fixed come out as base64,
decimals and UUIDs as text. A top-level field whose value is null is left out, as a JSON producer
would (``to_json``), so a field a newer schema added counts as schema drift only where it holds a
value.
"""

from __future__ import annotations

import re
from datetime import timedelta
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from jobs.spec.avro import AvroFormat, Encoding
from jobs.spec.duration import Duration

#: ``$.a.b``, ``$.a[0].b`` or the short ``a.b``: what Spark's ``get_json_object`` reads.
_PATH = re.compile(r"^(\$\.)?[A-Za-z_@][\w@\-]*(\[\d+\])*(\.[A-Za-z_@][\w@\-]*(\[\d+\])*)*$")
RECORD_TIMESTAMP = "record_timestamp"
#: The letters of Spark's datetime patterns (``yyyy-MM-dd HH:mm:ss``, ``dd/MM/yyyy'T'HH:mm XXX``).
_PATTERN_LETTERS = "GyuDMLdQqEFahKkHmsSVzOXxZ"


class TimeFormat(str, Enum):
    iso = "iso"
    epoch_s = "epoch_s"
    epoch_ms = "epoch_ms"
    epoch_us = "epoch_us"


def json_path(path: str) -> str:
    """A field path as Spark's ``get_json_object`` takes it: ``a.b`` -> ``$.a.b``."""
    return path if path.startswith("$.") else f"$.{path}"


def top_field(path: str) -> str:
    """The value's top-level key a path starts at: ``$.session.id`` -> ``session``."""
    return re.split(r"[.\[]", json_path(path)[2:], maxsplit=1)[0]


#: Spark datetime pattern letters -> ``strptime`` directives (the ones datetimes are written with).
_DIRECTIVES = {
    "yyyy": "%Y",
    "yy": "%y",
    "MMMM": "%B",
    "MMM": "%b",
    "MM": "%m",
    "dd": "%d",
    "HH": "%H",
    "hh": "%I",
    "mm": "%M",
    "ss": "%S",
    "a": "%p",
    "XXX": "%z",
    "XX": "%z",
    "X": "%z",
    "xxx": "%z",
    "xx": "%z",
    "Z": "%z",
    "EEE": "%a",
    "EEEE": "%A",
}
_TOKEN = re.compile(r"'[^']*'|S+|([A-Za-z])\1*|[^A-Za-z']+")


class UnsupportedTimeFormat(ValueError):
    """A datetime pattern the paced engine's source cannot read in Python."""


def strptime_format(pattern: str) -> tuple[str, bool]:
    """A Spark datetime pattern as a ``strptime`` format, and whether it carries an offset.

    >>> strptime_format("yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
    ('%Y-%m-%dT%H:%M:%S.%f%z', True)
    """
    out, offset = [], False
    for m in _TOKEN.finditer(pattern):
        tok = m.group(0)
        if tok.startswith("'"):
            out.append(tok[1:-1].replace("%", "%%") if tok != "''" else "'")
        elif tok[0] == "S":
            out.append("%f")  # fractions of a second, 1-6 digits
        elif tok[0].isalpha():
            if tok not in _DIRECTIVES:
                raise UnsupportedTimeFormat(f"the datetime pattern letter(s) {tok!r} of {pattern!r}")
            offset = offset or _DIRECTIVES[tok] == "%z"
            out.append(_DIRECTIVES[tok])
        else:
            out.append(tok.replace("%", "%%"))
    return "".join(out), offset


class SourceFormat(BaseModel):
    """One side's record format (see the module doc). Columns are the stream schema's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fields: dict[str, str] = Field(default_factory=dict, description="column -> JSON path in the value")
    time_format: str = Field(default="iso", description="iso | epoch_s | epoch_ms | epoch_us | a datetime pattern")
    time_zone: str | None = Field(default=None, description="zone of times written without an offset (default UTC)")
    arrival: str = Field(default=RECORD_TIMESTAMP, description="record_timestamp, or a JSON path to the arrival time")
    arrival_slack: Duration = Field(
        default=timedelta(hours=1),
        description="with an arrival field: how far the record timestamp may be from its day (else quarantined)",
    )
    id_from: list[str] = Field(default_factory=list, description="columns whose values make the id (hashed)")
    encoding: Encoding = Field(default=Encoding.json, description="json | avro: how a value is written")
    avro: AvroFormat | None = Field(default=None, description="encoding avro: writer schema(s) and framing")

    @field_validator("fields")
    @classmethod
    def _paths(cls, v: dict[str, str]) -> dict[str, str]:
        for col, path in v.items():
            if not _PATH.match(path):
                raise ValueError(f"{col}: {path!r} is not a JSON path; write $.a.b, $.a[0].b or a.b")
        return v

    @field_validator("time_format")
    @classmethod
    def _time_format(cls, v: str) -> str:
        letters = set(re.sub(r"'[^']*'|[^A-Za-z]", "", v))  # a pattern's letters, quoted text left out
        if v in TimeFormat.__members__ or (letters and letters <= set(_PATTERN_LETTERS) and letters & set("yHhm")):
            return v
        raise ValueError(f"{v!r}: use iso, epoch_s, epoch_ms, epoch_us or a pattern such as 'yyyy-MM-dd HH:mm:ss'")

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ZoneInfo(v)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"{v!r} is not an IANA time zone (e.g. UTC, America/Chicago)") from None
        return v

    @field_validator("arrival")
    @classmethod
    def _arrival(cls, v: str) -> str:
        if v != RECORD_TIMESTAMP and not _PATH.match(v):
            raise ValueError(f"{v!r}: use {RECORD_TIMESTAMP} or a JSON path to the arrival time, e.g. $.received_at")
        return v

    @model_validator(mode="after")
    def _encoding(self) -> SourceFormat:
        if self.encoding == Encoding.avro and self.avro is None:
            raise ValueError("encoding avro needs the writer schema: avro: {schema: <file>.avsc}")
        if self.encoding == Encoding.json and self.avro is not None:
            raise ValueError("avro is read only with encoding: avro")
        return self

    @property
    def arrival_field(self) -> str | None:
        """The JSON path arrival is read from, or None for the Kafka record timestamp."""
        return None if self.arrival == RECORD_TIMESTAMP else json_path(self.arrival)

    def path(self, column: str) -> str:
        return json_path(self.fields.get(column, column))

    def check_columns(self, schema: dict[str, str], id_column: str) -> None:
        """Cross-field rules against the stream's schema (called by the stream spec's validator)."""
        for col in [*self.fields, *self.id_from]:
            if col not in schema:
                raise ValueError(f"format: column {col!r} is not in schema (columns: {', '.join(schema)})")
        if self.id_from and id_column in self.id_from:
            raise ValueError(f"format.id_from: the id column {id_column!r} cannot be made from itself")
        if self.id_from and id_column in self.fields:
            raise ValueError(f"format: {id_column!r} is made from id_from; do not also map it in fields")


class BatchTable(BaseModel):
    """The batch job's own daily table for one side: the batch baselines read it instead of the
    table joinshift lands from Kafka, so the comparison is against the job being replaced::

        batch_table:
          path: /warehouse/search_responses   # a Delta or Parquet folder (any Hadoop URI), or
          # catalog: db.search_responses      # a table in Spark's catalog
          format: parquet                     # delta | parquet (for a path)
          ds_column: ds                       # the daily partition: a date or a 'yyyy-MM-dd' string
          columns: {session_id: sess}         # schema column -> table column, where names differ
          arrival_column: received_at         # optional: the arrival time (1-to-1 picks the first arrived)

    Stream-side analyses (recommend, attribution, replay) still read the records landed from
    Kafka: they need the arrival order only the topic has.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(default=None, description="a Delta or Parquet folder")
    catalog: str | None = Field(default=None, description="a table name in Spark's catalog (db.table)")
    format: str = Field(default="delta", pattern="^(delta|parquet)$", description="delta | parquet (for a path)")
    ds_column: str = Field(default="ds", description="the daily partition column")
    columns: dict[str, str] = Field(default_factory=dict, description="schema column -> table column")
    arrival_column: str | None = Field(default=None, description="the table's arrival time, if it has one")

    @field_validator("catalog")
    @classmethod
    def _catalog_name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*){0,2}$", v):
            raise ValueError(f"{v!r}: write a table name, e.g. db.search_responses")
        return v

    def check_columns(self, schema: dict[str, str]) -> None:
        if (self.path is None) == (self.catalog is None):
            raise ValueError("batch_table: give exactly one of path or catalog")
        for col in self.columns:
            if col not in schema:
                raise ValueError(f"batch_table.columns: {col!r} is not in schema (columns: {', '.join(schema)})")

    def location(self) -> str:
        return self.path or f"catalog table {self.catalog}"
