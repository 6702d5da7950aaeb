"""Import your own files into the spec's topics: ``joinshift import``.

Each row of a Parquet, CSV or JSON-lines file becomes one Kafka record of its side's topic: the
value is the row as a JSON object (its columns as keys, so the side's ``format.fields`` maps from
them), the key is the join key, and the record timestamp is the row's arrival time. Both files are
sent in one pass in arrival order, as the two logs reached the warehouse, so landing, the batch
baselines, the stream and a replay-as-live see the same history a live deployment would have.

The arrival time is the side's ``format.arrival`` field when the spec names one, else the
column ``--arrival COLUMN``; it is read with the side's ``format.time_format`` and ``time_zone``
(the same parser the join uses).

    joinshift import --spec my.yaml --left searches.parquet --right clicks.csv --arrival received_at
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.records import parse_time
from jobs.spec import JoinSpec
from jobs.storage import kafka
from jobs.storage.delta_io import MissingInput

FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


class ImportRefused(ValueError):
    """A file or argument ``joinshift import`` cannot use; the message says what to change."""


def read_rows(spark: SparkSession, path: str) -> DataFrame:
    """A Parquet / CSV (with a header row) / JSON-lines file (or a folder of them) as a DataFrame."""
    p = Path(path)
    if not p.exists():
        raise MissingInput(f"{path} does not exist: name a Parquet, CSV or JSON-lines file")
    suffix = next((s for s in ([p.suffix] if p.is_file() else [f.suffix for f in p.iterdir()]) if s in FORMATS), "")
    if not suffix:
        raise ImportRefused(f"{path}: not a Parquet, CSV or JSON-lines file (.parquet, .csv, .json, .jsonl)")
    reader = spark.read.format(FORMATS[suffix])
    if FORMATS[suffix] == "csv":
        reader = reader.option("header", True)  # every value stays text; the side's format parses it
    return reader.load(str(p.resolve()))  # absolute: a Spark Connect server has a working folder of its own


def to_records(rows: DataFrame, spec: JoinSpec, side: str, arrival: str | None) -> DataFrame:
    """Pure core: file rows -> (topic, key, value, arrival_ms) of one side; rows without a parsable
    arrival time are refused by the caller (a record needs a timestamp)."""
    st = spec.side(side)
    value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in rows.columns]))
    if st.format.arrival_field:  # the spec names the field: it wins, so the record timestamp agrees with it
        raw_arrival = F.get_json_object(value, st.format.arrival_field)
    elif arrival is None:
        raise ImportRefused(
            f"the {side} file needs an arrival time: name its column with --arrival, or set "
            f"{side}.format.arrival in the spec to the field that holds it"
        )
    elif arrival not in rows.columns:
        raise ImportRefused(f"the {side} file has no column {arrival!r} (columns: {', '.join(rows.columns)})")
    else:
        raw_arrival = F.col(f"`{arrival}`").cast("string")
    keys = [F.get_json_object(value, st.format.path(k)) for k in st.key]
    return rows.select(
        F.lit(st.topic).alias("topic"),
        (keys[0] if len(keys) == 1 else F.concat_ws("|", *keys)).alias("key"),
        value.alias("value"),
        F.unix_millis(parse_time(raw_arrival, st.format)).alias("arrival_ms"),
    )


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
    bad = records.arrival_ms.isna()
    if bad.any():
        first = records[bad].iloc[0]
        raise ImportRefused(
            f"{int(bad.sum())} rows have no arrival time the side's format.time_format can read "
            f"(first: topic {first.topic}, value {first.value[:120]}); fix the column or the format"
        )
    records = records.astype({"arrival_ms": "int64"}).sort_values("arrival_ms", kind="stable", ignore_index=True)
    for side in files:
        kafka.create_topic(bootstrap, spec.side(side).topic, partitions=partitions)
    return publish(records, bootstrap, progress=progress, every=max(1, len(records) // 100))
