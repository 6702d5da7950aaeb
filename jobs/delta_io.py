"""The one Delta writer module: partition replacement and insert-only merges.

Both are idempotent, which is what makes reruns and restarts safe:
``replace_partitions`` rewrites exactly the partitions a run owns; ``insert_new`` adds only
rows whose key is not in the table yet (the guard that keeps replayed or re-run micro-batches
from duplicating output).
"""

from __future__ import annotations

from collections.abc import Sequence

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def read_table(spark: SparkSession, path: str) -> DataFrame:
    """A Delta table by path; a clear error if it was never written."""
    if not table_exists(spark, path):
        raise FileNotFoundError(f"no Delta table at {path} (has the job that writes it run?)")
    return spark.read.format("delta").load(path)


def _sql_literal(v: object) -> str:
    return "'" + str(v).replace("'", "''") + "'"


def replace_partitions(df: DataFrame, path: str, where: dict[str, Sequence[object]],
                       partition_by: Sequence[str] = ("ds",)) -> None:
    """Overwrite exactly the rows matching ``where`` (column -> allowed values) with ``df``.

    Example::

        replace_partitions(events, path, {"ds": ["2026-11-20"]})
    """
    if not where:
        raise ValueError("'where' in replace_partitions must name at least one column")
    predicate = " AND ".join(
        f"{col} IN ({', '.join(_sql_literal(v) for v in values)})" for col, values in where.items()
    )
    spark = df.sparkSession
    writer = df.write.format("delta").mode("overwrite")
    if table_exists(spark, path):
        writer.option("replaceWhere", predicate).save(path)
    else:
        writer.partitionBy(*partition_by).save(path)


def insert_new(df: DataFrame, path: str, keys: Sequence[str],
               partition_by: Sequence[str] = ("ds",), prune: Sequence[str] = ("ds",)) -> None:
    """Insert rows of ``df`` whose ``keys`` are not in the table yet (null-safe key equality).

    ``prune`` names partition columns whose values in ``df`` bound the part of the table the
    merge has to read.
    """
    if not keys:
        raise ValueError("'keys' in insert_new must name at least one column")
    source = df.dropDuplicates(list(keys))
    spark = df.sparkSession
    if not table_exists(spark, path):
        source.write.format("delta").mode("append").partitionBy(*partition_by).save(path)
        return
    cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    for col in prune:
        values = [r[0] for r in source.select(col).distinct().collect()]
        if not values:
            return
        cond += f" AND t.`{col}` IN ({', '.join(_sql_literal(v) for v in values)})"
    (
        DeltaTable.forPath(spark, path).alias("t")
        .merge(source.alias("s"), cond)
        .whenNotMatchedInsertAll()
        .execute()
    )


def count_by(df: DataFrame, *cols: str) -> dict[tuple, int]:
    return {tuple(r[c] for c in cols): r["n"] for r in df.groupBy(*cols).agg(F.count("*").alias("n")).collect()}
