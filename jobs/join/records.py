"""Parse raw Kafka records into typed events, and say exactly why a record is bad.

Pure DataFrame -> DataFrame functions shared by the landing job (batch) and the streaming join,
so both paths accept and reject exactly the same records. Bad records are never dropped: they
carry a ``_reason`` (and ``_detail``) and go to the quarantine table with their raw payload.

Each side's ``format`` (:mod:`jobs.spec.source`) says where a column sits in the value (JSON
paths), how times are written, where the arrival time comes from and how an id is made. A field
the schema does not name is kept and counted as schema drift (``_drift``) under the default
``unknown_fields: keep``.

A side with ``format.encoding: avro`` is decoded first (:func:`jobs.join.avro.decoded`: the
writer schema from the spec, Confluent framing optional) into the JSON text of its record; every
check below then reads that JSON. Its quarantined ``raw_value`` is the value's bytes in base64
(the bytes are not text); a JSON side's is the value as text.

Reason codes (first failing check wins):

==========================  ==========================================================
``malformed_avro``          ``encoding: avro`` and the value does not decode (``_detail``: why)
``malformed_json``          the value is not a JSON object
``null_id``                 the event id is missing or null
``null_key``                a join-key column is missing or null
``bad_event_time``          the event time is missing or not in the side's ``format.time_format``
``bad_arrival_time``        ``format.arrival`` names a field, and it is missing or not a time
``bad_type``                a schema column does not parse as its type (``_detail`` names it)
``unexpected_field``        a JSON field not in the schema (``unknown_fields: quarantine``)
``event_time_too_old``      event time earlier than arrival − ``timestamp_validity.max_past``
``event_time_in_future``    event time later than arrival + ``timestamp_validity.max_future``
``duplicate_event_id``      an earlier-arrived record had the same event id (landing only)
==========================  ==========================================================
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION
from jobs.spec import SCHEMA_TYPES, JoinSpec, StreamSpec, UnknownFields
from jobs.spec.avro import Encoding
from jobs.spec.source import SourceFormat, TimeFormat, top_field

#: An ISO time that carries its own offset (``Z``, ``+02:00``, ``-0500``): no zone is applied to it.
_HAS_OFFSET = r"\d{2}:\d{2}(:\d{2}([.,]\d+)?)?\s*(Z|z|[+-]\d{2}(:?\d{2})?)$"
#: Epoch values beyond these are not times (they would overflow a timestamp): parsed as null.
_EPOCH_LIMITS = {"epoch_s": 1e12, "epoch_ms": 1e15, "epoch_us": 1e18}

REASONS = (
    "malformed_avro",
    "malformed_json",
    "null_id",
    "null_key",
    "bad_event_time",
    "bad_arrival_time",
    "arrival_outside_slack",
    "bad_type",
    "unexpected_field",
    "event_time_too_old",
    "event_time_in_future",
    "duplicate_event_id",
)

QUARANTINE_COLUMNS = (
    "stage",
    "stream",
    "topic",
    "partition",
    "offset",
    "arrival_time",
    "ds",
    "reason",
    "detail",
    "raw_key",
    "raw_value",
)


def arrival_ds(ts: Column, timezone: str) -> Column:
    """The Hive partition a record lands in: its arrival date in the spec's zone."""
    if timezone == "UTC":
        return F.to_date(ts)  # the session's zone is UTC: no conversion a record (java.time objects)
    return F.to_date(F.from_utc_timestamp(ts, timezone))


def parse_time(raw: Column, fmt: SourceFormat) -> Column:
    """A time written as the side's ``time_format`` says -> a timestamp (null if it does not parse)."""
    tf = fmt.time_format
    if tf in _EPOCH_LIMITS:
        v = raw.try_cast("double")
        scale = {"epoch_s": 1_000_000, "epoch_ms": 1_000, "epoch_us": 1}[tf]
        micros = (v * F.lit(scale)).try_cast("bigint")
        return F.when(F.abs(v) < F.lit(_EPOCH_LIMITS[tf]), F.timestamp_micros(micros))
    if tf == TimeFormat.iso.value:
        ts, has_offset = raw.try_cast("timestamp"), raw.rlike(_HAS_OFFSET)
    else:  # a datetime pattern; it carries an offset when it has an offset letter
        ts, has_offset = F.try_to_timestamp(raw, F.lit(tf)), F.lit(any(c in tf for c in "XxZO"))
    if fmt.time_zone is None or fmt.time_zone == "UTC":
        return ts  # the session's zone is UTC
    return F.when(has_offset, ts).otherwise(F.to_utc_timestamp(ts, fmt.time_zone))


def _typed(raw: Column, typ: str, fmt: SourceFormat) -> Column:
    if typ == "string":
        return raw
    if typ == "timestamp":
        return parse_time(raw, fmt)
    return raw.try_cast(SCHEMA_TYPES[typ])


def _once(col: Column) -> Column:
    """``col``, computed once a record. Spark's optimizer moves a filter below the projection that
    computes the columns it tests and copies each column's expression into the condition once per
    reference (SPARK-47672, open in 4.2): the good-record filter parsed every JSON value about ten
    times, 4x the parse's CPU (BENCHMARKS, "The good-record filter parsed each record ten times").
    A filter stays above a projection holding a nondeterministic column, so the parse's columns
    (and the typed ones) carry an always-true test of the task's partition id, which a task
    retry sees the same."""
    return F.when(F.spark_partition_id() >= 0, col)


def _json_reads(fmt: SourceFormat, columns: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Where each column's text comes from: ``{column: key}`` of those at a top-level key (read from
    the parsed map) and ``{column: path}`` of those at a nested JSON path."""
    top: dict[str, str] = {}
    nested: dict[str, str] = {}
    for c in columns:
        path = fmt.path(c)
        if top_field(path) == path[2:]:
            top[c] = path[2:]
        else:
            nested[c] = path
    return top, nested


def _text(column: str) -> str:
    """The column holding a schema column's raw text, read from the JSON once a record."""
    return f"_text_{column}"


def parse_records(raw: DataFrame, stream: StreamSpec, spec: JoinSpec, keep: tuple[str, ...] = ()) -> DataFrame:
    """Kafka rows (key, value, topic, partition, offset, timestamp) -> typed rows + ``_reason``.

    Good rows have ``_reason`` null; ``_drift`` names the fields the schema does not (kept rows,
    ``unknown_fields: keep``). ``keep``: columns of ``raw`` carried along as they are (the paced
    engine's PTs). Works on batch and streaming DataFrames alike.
    """
    fmt = stream.format
    avro = fmt.avro if fmt.encoding == Encoding.avro else None
    if avro:  # fastavro and pandas for Avro sides only: a paced stream's Python processes import this module
        from jobs.join.avro import decoded
    df = raw.select(
        F.col("key").cast("string").alias("_raw_key"),
        (F.base64("value") if avro else F.col("value").cast("string")).alias("_raw_value"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias(PARTITION),
        F.col("offset").alias(OFFSET),
        F.col("timestamp").alias("_record_ts"),
        *keep,
        # the value as JSON text: an Avro value decoded (its record's JSON, or why it does not decode)
        *(
            [decoded(F.col("value"), avro).alias("_decoded")]
            if avro
            else [F.col("value").cast("string").alias("_json")]
        ),
    )
    if avro:
        df = df.select("*", F.col("_decoded.json").alias("_json"), F.col("_decoded.error").alias("_avro_error"))
        df = df.drop("_decoded")
    schema = stream.schema_
    made_id = bool(fmt.id_from)
    read = [c for c in schema if not (made_id and c == stream.id)]
    top, paths = _json_reads(fmt, read)
    # the JSON is read once a record: the map of its top-level fields, each nested path, the arrival;
    # then each top-level column's text from the map once (a lookup scans the map's keys)
    df = df.select(
        "*",
        _once(F.from_json("_json", "map<string,string>")).alias("_fields"),
        *[_once(F.get_json_object("_json", p)).alias(_text(c)) for c, p in paths.items()],
        *([_once(F.get_json_object("_json", fmt.arrival_field)).alias("_arrival_raw")] if fmt.arrival_field else []),
    )
    df = df.select("*", *[_once(F.col("_fields").getItem(k)).alias(_text(c)) for c, k in top.items()])
    raw_of = {c: F.col(_text(c)) for c in read}
    typed = {c: _typed(raw_of[c], t, fmt) for c, t in schema.items() if c in raw_of}
    if made_id:  # no id in the data: a hash of the chosen fields' text (a missing field hashes as \0)
        parts = [F.coalesce(raw_of[c], F.lit("\u0000")) for c in fmt.id_from]
        typed[stream.id] = F.substring(F.sha2(F.concat_ws("\u001f", *parts), 256), 1, 32)
    arrival_raw = F.col("_arrival_raw") if fmt.arrival_field else None
    arrival_col = parse_time(arrival_raw, fmt) if arrival_raw is not None else F.col("_record_ts")
    # typed once too: the checks test the event time three times, and each copy the filter takes is a parse
    df = df.select("*", _once(arrival_col).alias(ARRIVAL_TIME), *[_once(typed[c]).alias(c) for c in schema])

    # a key or id written but not of its type is that, not a missing one (null_key, null_id)
    written = {c: raw_of[c].isNotNull() if c in raw_of else F.lit(False) for c in (stream.id, *stream.key)}
    bad_type_cols = [
        F.when(raw_of[c].isNotNull() & F.col(c).isNull(), F.lit(c))
        for c in raw_of
        if c != stream.event_time and schema[c] != "string"
    ]
    bad_type_detail = F.concat_ws(",", *bad_type_cols) if bad_type_cols else F.lit("")
    known = {top_field(fmt.path(c)) for c in raw_of} | ({top_field(fmt.arrival_field)} if fmt.arrival_field else set())
    unknown = F.array_except(F.map_keys("_fields"), F.array(*[F.lit(c) for c in sorted(known)]))
    # array_except builds a hash set a record, a tenth of the join's CPU (BENCHMARKS, "Each value
    # typed once"): it runs only for a record with more fields than the known ones it has (more
    # keys than that are unknown fields or a known one twice, which the JSON map keeps)
    held = {k: F.col(_text(c)).isNotNull() for c, k in top.items()}  # its text is there: so is its key
    present = sum((held.get(k, F.map_contains_key("_fields", k)).cast("int") for k in sorted(known)), F.lit(0))
    has_unknown = (F.size("_fields") > present) & (F.size(unknown) > 0)
    validity = spec.timestamp_validity
    et, arrival = F.col(stream.event_time), F.col(ARRIVAL_TIME)

    checks: list[tuple[Column, str, Column]] = [
        *([(F.col("_avro_error").isNotNull(), "malformed_avro", F.col("_avro_error"))] if avro else []),
        (F.col("_fields").isNull(), "malformed_json", F.lit(None)),
        (F.col(stream.id).isNull() & ~written[stream.id], "null_id", F.lit(stream.id)),
        (
            F.greatest(*[F.col(k).isNull() & ~written[k] for k in stream.key], F.lit(False)),
            "null_key",
            F.lit(",".join(stream.key)),
        ),
        (et.isNull(), "bad_event_time", raw_of[stream.event_time]),
    ]
    if arrival_raw is not None:
        checks.append((arrival.isNull(), "bad_arrival_time", arrival_raw))
        # landing a ds reads the record timestamps of that day and the slack around it: a record
        # stamped further from its arrival's day is read by no day that keeps it, so it is named
        # here, on the day of its record timestamp
        slack = F.expr(f"INTERVAL {int(fmt.arrival_slack.total_seconds())} SECONDS")
        day = arrival_ds(arrival, spec.timezone)
        first = F.to_utc_timestamp(day.cast("timestamp"), spec.timezone) - slack
        past = F.to_utc_timestamp(F.date_add(day, 1).cast("timestamp"), spec.timezone) + slack
        off = (F.col("_record_ts") < first) | (F.col("_record_ts") >= past)
        checks.append((off, "arrival_outside_slack", arrival_raw))
    checks.append((bad_type_detail != "", "bad_type", bad_type_detail))
    if spec.unknown_fields == UnknownFields.quarantine:
        checks.append((has_unknown, "unexpected_field", F.array_join(unknown, ",")))
    checks += [
        (
            et < arrival - F.expr(f"INTERVAL {int(validity.max_past.total_seconds())} SECONDS"),
            "event_time_too_old",
            et.cast("string"),
        ),
        (
            et > arrival + F.expr(f"INTERVAL {int(validity.max_future.total_seconds())} SECONDS"),
            "event_time_in_future",
            et.cast("string"),
        ),
    ]
    reason: Column = F.lit(None).cast("string")
    detail: Column = F.lit(None).cast("string")
    for cond, code, det in reversed(checks):
        reason = F.when(cond, F.lit(code)).otherwise(reason)
        detail = F.when(cond, det.cast("string")).otherwise(detail)
    drift = F.when(has_unknown, F.array_join(unknown, ","))
    return (
        df.withColumn("_reason", reason)
        .withColumn("_detail", detail)
        .withColumn("_drift", drift if spec.unknown_fields == UnknownFields.keep else F.lit(None).cast("string"))
        .withColumn("ds", arrival_ds(F.coalesce(_kept_arrival(F.col("_reason")), F.col("_record_ts")), spec.timezone))
        .drop("_fields", "_json", *[_text(c) for c in read], "_arrival_raw", "_avro_error")
    )


def _kept_arrival(reason: Column) -> Column:
    """The arrival a record's ds comes from: none (its record timestamp's) when it is outside the slack."""
    return F.when(reason.isNull() | (reason != "arrival_outside_slack"), F.col(ARRIVAL_TIME))


def good_events(parsed: DataFrame, stream: StreamSpec, keep: tuple[str, ...] = ()) -> DataFrame:
    """The typed events of a parsed frame: schema columns, arrival, Kafka position, ds (and ``keep``)."""
    return parsed.where(F.col("_reason").isNull()).select(*stream.schema_, ARRIVAL_TIME, PARTITION, OFFSET, "ds", *keep)


def quarantine_rows(parsed: DataFrame, stream: StreamSpec, stage: str) -> DataFrame:
    """The bad records of a parsed frame in the quarantine table's shape."""
    return parsed.where(F.col("_reason").isNotNull()).select(
        F.lit(stage).alias("stage"),
        F.lit(stream.name).alias("stream"),
        F.col("_topic").alias("topic"),
        F.col(PARTITION).alias("partition"),
        F.col(OFFSET).alias("offset"),
        F.col(ARRIVAL_TIME).alias("arrival_time"),
        "ds",
        F.col("_reason").alias("reason"),
        F.col("_detail").alias("detail"),
        F.col("_raw_key").alias("raw_key"),
        F.col("_raw_value").alias("raw_value"),
    )


def mark_duplicates(parsed: DataFrame, stream: StreamSpec, seen_ids: DataFrame | None = None) -> DataFrame:
    """Batch only: flag every record whose event id arrived before (in this frame or in ``seen_ids``).

    The first arrival (by arrival time, then partition, then offset) stays good, so a re-sent
    record never doubles a match and never vanishes: it is quarantined as ``duplicate_event_id``.
    """
    from pyspark.sql import Window

    good = F.col("_reason").isNull()
    order = Window.partitionBy(stream.id, good).orderBy(ARRIVAL_TIME, PARTITION, OFFSET)
    rank = F.when(good, F.row_number().over(order))
    df = parsed.withColumn("_dup_rank", rank)
    dup = good & (F.col("_dup_rank") > 1)
    if seen_ids is not None:
        seen = seen_ids.select(F.col(stream.id).alias("_seen_id")).distinct()
        df = df.join(seen, F.col(stream.id) == F.col("_seen_id"), "left")
        dup = dup | (good & F.col("_seen_id").isNotNull())
    return (
        df.withColumn("_detail", F.when(dup, F.col(stream.id)).otherwise(F.col("_detail")))
        .withColumn("_reason", F.when(dup, F.lit("duplicate_event_id")).otherwise(F.col("_reason")))
        .drop("_dup_rank", *(["_seen_id"] if seen_ids is not None else []))
    )
