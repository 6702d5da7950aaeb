"""Import your own files into the spec's topics: ``joinshift import``.

Each row of a Parquet, CSV or JSON-lines file becomes one Kafka record of its side's topic: the
value is the row as a JSON object (its columns as keys, so the side's ``format.fields`` maps from
them), the key is the join key, and the record timestamp is the row's arrival time. Both files are
sent in one pass in arrival order, as the two logs reached the warehouse, so landing, the batch
baselines, the stream and a replay-as-live see the same history a live deployment would have.

The arrival time is the side's ``format.arrival`` field when the spec names one, else the
column ``--arrival COLUMN``; it is read with the side's ``format.time_format`` and ``time_zone``
(the same parser the join uses).

A side with ``format.encoding: avro`` gets Avro values: each row's JSON object written with the
side's writer schema (``avro.schema``: a field the schema does not have is left out, a schema
field the row lacks takes its default, a value of the wrong type refuses the import, naming it),
framed as ``avro.framing`` says; Confluent framing writes the registry id ``avro.schemas`` lists
``schema`` under (without ``schemas`` there is no id to write: the import is refused). Key and
arrival are then read from the value decoded back, as the stream will read it, so
``time_format`` describes the decoded record (ISO for ``timestamp-millis``).

    joinshift import --spec my.yaml --left searches.parquet --right clicks.csv --arrival received_at
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.avro import decoded, encoded
from jobs.join.records import parse_time
from jobs.spec import JoinSpec, fmt_duration
from jobs.spec.avro import Encoding, Framing
from jobs.storage import kafka
from jobs.storage.delta_io import MissingInput

FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


#: Bytes of a record batch that are not the value: its header, the key and the timestamp.
RECORD_OVERHEAD = 1024


class ImportRefused(ValueError):
    """A file or argument ``joinshift import`` cannot use; the message says what to change."""


def file_format(path: str) -> str:
    """Spark's format of a Parquet / CSV / JSON-lines file (or a folder of them); checked before
    anything starts (the CLI asks it before Kafka and Spark)."""
    p = Path(path)
    if not p.exists():
        raise MissingInput(f"{path} does not exist: name a Parquet, CSV or JSON-lines file")
    suffix = next((s for s in ([p.suffix] if p.is_file() else [f.suffix for f in p.iterdir()]) if s in FORMATS), "")
    if not suffix:
        raise ImportRefused(f"{path}: not a Parquet, CSV or JSON-lines file (.parquet, .csv, .json, .jsonl)")
    return FORMATS[suffix]


def read_rows(spark: SparkSession, path: str) -> DataFrame:
    """A Parquet / CSV (with a header row) / JSON-lines file (or a folder of them) as a DataFrame."""
    p, fmt = Path(path), file_format(path)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", True)  # every value stays text; the side's format parses it
    return reader.load(str(p.resolve()))  # absolute: a Spark Connect server has a working folder of its own


def to_records(rows: DataFrame, spec: JoinSpec, side: str, arrival: str | None) -> DataFrame:
    """Pure core: file rows -> (topic, key, value, arrival_ms, error) of one side; the value is
    bytes (UTF-8 JSON, or Avro for an Avro side), ``error`` says why a row could not be written
    as Avro. Rows with an error or without a parsable arrival time are refused by the caller."""
    st = spec.side(side)
    if not st.format.arrival_field and arrival is None:
        raise ImportRefused(
            f"the {side} file needs an arrival time: name its column with --arrival, or set "
            f"{side}.format.arrival in the spec to the field that holds it"
        )
    if not st.format.arrival_field and arrival not in rows.columns:
        raise ImportRefused(f"the {side} file has no column {arrival!r} (columns: {', '.join(rows.columns)})")
    text = F.to_json(F.struct(*[F.col(f"`{c}`") for c in rows.columns]))
    # --arrival: a column of the file, read as the file has it (a spec's arrival field is read from the value)
    column = F.lit(None) if st.format.arrival_field else F.col(f"`{arrival}`").cast("string")
    avro = st.format.avro if st.format.encoding == Encoding.avro else None
    if avro is None:
        rows = rows.select(
            text.alias("_json"), text.cast("binary").alias("_value"), F.lit(None).alias("_error"), column.alias("_at")
        )
    elif avro.framing == Framing.confluent and avro.write_id is None:
        raise ImportRefused(
            f"{side}.format.avro: confluent framing writes the writer schema's registry id; list "
            f"{side}.format.avro.schema under its id in avro.schemas, e.g. {{1: {avro.schema_}}}"
        )
    else:  # key and arrival field from the value decoded back: what the stream will read
        enc = rows.select(encoded(text, avro).alias("_enc"), column.alias("_at"))
        enc = enc.select(F.col("_enc.value").alias("_value"), F.col("_enc.error").alias("_error"), "_at")
        rows = enc.select("*", decoded(F.col("_value"), avro).getField("json").alias("_json"))
    if st.format.arrival_field:  # the spec names the field: it wins, so the record timestamp agrees with it
        raw_arrival = F.get_json_object(F.col("_json"), st.format.arrival_field)
    else:
        raw_arrival = F.col("_at")
    keys = [F.get_json_object(F.col("_json"), st.format.path(k)) for k in st.key]
    return rows.select(
        F.lit(st.topic).alias("topic"),
        (keys[0] if len(keys) == 1 else F.concat_ws("|", *keys)).alias("key"),
        F.col("_value").alias("value"),
        F.unix_millis(parse_time(raw_arrival, st.format)).alias("arrival_ms"),
        F.col("_error").cast("string").alias("error"),
    )


def topic_refusal(topic: str, configs: dict[str, str], records: Any, now_ms: int) -> str | None:
    """Pure core: why ``topic``, with ``configs`` (:func:`jobs.storage.kafka.create_topic`'s
    answer), would refuse or lose some of ``records`` (its rows: ``value``, ``arrival_ms``), or
    None. Asked before anything is sent: a broker refuses record by record, so a late refusal
    leaves the rows before it in the topic."""
    if records.empty:
        return None
    alter = f"kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config"
    fix = lambda name: f"{alter} {name}={kafka.TOPIC_CONFIGS[name]} (as on the topics joinshift makes)"  # noqa: E731
    if "compact" in (configs.get("cleanup.policy") or ""):
        return (
            f"topic {topic} is compacted (cleanup.policy={configs['cleanup.policy']}): Kafka keeps the last record "
            "of each key, and a record's key is its join key, so it would drop events: " + fix("cleanup.policy")
        )
    if configs.get("message.timestamp.type") == "LogAppendTime":
        return (
            f"topic {topic} stamps records with the time they are appended (message.timestamp.type="
            "LogAppendTime), so the files' arrival times would be lost: " + fix("message.timestamp.type")
        )
    takes = int(configs.get("max.message.bytes") or kafka.MAX_RECORD_BYTES)
    over = records.value[records.value.map(lambda v: RECORD_OVERHEAD + len(v or b"") > takes)]
    # the brokers weigh a row as it is sent: alone in its batch (it is over the producer's
    # batch_size), compressed as kafka-python's zstd codec does (zstandard's default level)
    zstd = zstandard.ZstdCompressor()  # one compressor for every row over the limit
    needs = over.map(lambda v: RECORD_OVERHEAD + len(zstd.compress(v)))
    if (needs > takes).any():
        return (
            f"{int((needs > takes).sum())} rows are larger than topic {topic} takes, compressed (max.message.bytes="
            f"{takes}, the largest needs {int(needs.max())}): " + fix("max.message.bytes") + ", or leave out what "
            "the join does not read"
        )
    age = lambda ms: fmt_duration(ms / 1000)  # noqa: E731
    oldest, newest = int(records.arrival_ms.min()), int(records.arrival_ms.max())
    for name, verb in (("retention.ms", "deletes"), ("message.timestamp.before.max.ms", "refuses")):
        limit = int(configs.get(name) or -1)
        if 0 <= limit < now_ms - oldest:
            return (
                f"topic {topic} {verb} records stamped longer ago than {age(limit)} ({name}={limit}) and the "
                f"oldest row arrived {age(now_ms - oldest)} ago, so Kafka would {verb[:-1]} rows of the import: "
                + fix(name)
            )
    limit = int(configs.get("message.timestamp.after.max.ms") or -1)
    if 0 <= limit < newest - now_ms:
        return (
            f"topic {topic} refuses records stamped more than {age(limit)} ahead of now (message.timestamp.after."
            f"max.ms={limit}) and the newest row arrives {age(newest - now_ms)} from now, so Kafka would refuse "
            "rows of the import: " + fix("message.timestamp.after.max.ms")
        )
    return None


def import_files(
    spark: SparkSession,
    spec: JoinSpec,
    files: dict[str, str],
    bootstrap: str,
    *,
    arrival: str | None = None,
    partitions: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """I/O shell: read each side's file, merge them in arrival order, publish to the spec's topics
    (created if missing). Returns records sent per topic."""
    from jobs.workload.publisher import publish

    frames = [to_records(read_rows(spark, path), spec, side, arrival) for side, path in files.items()]
    merged = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    records: Any = merged.toPandas()
    records["value"] = [bytes(v) if v is not None else None for v in records.value]  # bytearray -> bytes
    unfit = records.error.notna()
    if unfit.any():
        first = records[unfit].iloc[0]
        raise ImportRefused(
            f"{int(unfit.sum())} rows do not fit topic {first.topic}'s Avro writer schema (first: {first.error}); "
            "fix the file's columns or the schema (a CSV holds only text: write Parquet or JSON lines)"
        )
    bad = records.arrival_ms.isna()
    if bad.any():
        first = records[bad].iloc[0]
        raise ImportRefused(
            f"{int(bad.sum())} rows have no arrival time the side's format.time_format can read "
            f"(first: topic {first.topic}, value {first.value[:120]!r}); fix the column or the format"
        )
    limit = kafka.MAX_RECORD_BYTES - RECORD_OVERHEAD
    sizes = records.value.map(lambda v: len(v) if v is not None else 0)
    big = sizes > limit
    if big.any():  # refused before any is sent: the producer would send the rows before the first of these
        first = records[big].iloc[0]
        raise ImportRefused(
            f"{int(big.sum())} rows are larger than a Kafka record may be here ({limit} bytes; first: topic "
            f"{first.topic}, {int(sizes[big].iloc[0])} bytes): split them or leave out what the join does not read"
        )
    records = records.drop(columns="error")
    records = records.astype({"arrival_ms": "int64"}).sort_values("arrival_ms", kind="stable", ignore_index=True)
    now_ms, batch = int(time.time() * 1000), kafka.producer_config(bootstrap)["batch_size"]
    for side in files:
        topic = spec.side(side).topic
        configs = kafka.create_topic(bootstrap, topic, partitions=partitions)
        refusal = topic_refusal(topic, configs, records[records.topic == topic], now_ms)
        if refusal:
            raise ImportRefused(refusal)
        # a batch of small rows fits the topic too: at most its limit before compression
        batch = max(1, min(batch, int(configs.get("max.message.bytes") or batch) - RECORD_OVERHEAD))
    return publish(records, bootstrap, progress=progress, every=max(1, len(records) // 100), batch_size=batch)
