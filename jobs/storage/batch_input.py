"""What the batch baselines read for one side: the table joinshift landed from Kafka, or the batch
job's own daily table (the side's ``batch_table``), in one shape: the schema's columns, the
arrival time, Kafka partition and offset (null for a table of your own), and ``ds``.

A table of your own is read as it is, as the job being replaced reads it: no quarantine, no
validity rules; its ``ds_column`` may be a date or a ``yyyy-MM-dd`` string.
"""

from __future__ import annotations

from datetime import date

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION
from jobs.spec import SCHEMA_TYPES
from jobs.spec.source import BatchTable
from jobs.storage import delta_io
from jobs.storage.tables import Tables


def _load(spark: SparkSession, bt: BatchTable, side: str) -> DataFrame:
    try:
        df = spark.read.table(bt.catalog) if bt.catalog else spark.read.format(bt.format).load(bt.path)
        df.schema  # noqa: B018  # resolve now: a missing table fails here, with its name
    except AnalysisException as e:
        first = str(e).strip().splitlines()[0][:200]
        raise delta_io.MissingInput(
            f"{side}.batch_table: {bt.location()} cannot be read as {bt.format if bt.path else 'a table'} "
            f"({first}); fix the path, catalog or format"
        ) from None
    return df


def read_side(
    spark: SparkSession, tables: Tables, side: str, days: list[date] | None = None, *, made_by: str = "joinshift land"
) -> DataFrame:
    """One side's batch input (all days, or ``days``), in the landed table's shape."""
    st = tables.spec.side(side)
    bt = st.batch_table
    if bt is None:
        df = delta_io.read_table(spark, tables.landed(side), made_by=made_by)
        return df if days is None else df.where(F.col("ds").isin(days))
    raw = _load(spark, bt, side)
    wanted = {bt.columns.get(c, c) for c in st.schema_} | {bt.ds_column}
    if bt.arrival_column:
        wanted.add(bt.arrival_column)
    missing = sorted(c for c in wanted if c not in raw.columns)
    if missing:
        raise delta_io.MissingInput(
            f"{side}.batch_table: {bt.location()} has no column {', '.join(missing)} (columns: "
            f"{', '.join(raw.columns)}); map the spec's columns with batch_table.columns"
        )
    ds = F.col(bt.ds_column).cast("date")
    if days is not None:
        raw = raw.where(ds.isin(days))
    arrival = F.col(bt.arrival_column).cast("timestamp") if bt.arrival_column else F.lit(None).cast("timestamp")
    return raw.select(
        *[F.col(bt.columns.get(c, c)).cast(SCHEMA_TYPES[t]).alias(c) for c, t in st.schema_.items()],
        arrival.alias(ARRIVAL_TIME),
        F.lit(None).cast("int").alias(PARTITION),
        F.lit(None).cast("long").alias(OFFSET),
        ds.alias("ds"),
    )


def own_table_days(spark: SparkSession, tables: Tables, side: str) -> list[date] | None:
    """The days a side's own batch table holds, or None when the side reads what joinshift landed."""
    bt = tables.spec.side(side).batch_table
    if bt is None:
        return None
    raw = _load(spark, bt, side)
    return sorted(r.ds for r in raw.select(F.col(bt.ds_column).cast("date").alias("ds")).distinct().collect() if r.ds)
