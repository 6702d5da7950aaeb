"""The Hive-style daily batch join: the paper's three baselines (§7.1) and the cut-off-free
``reference``, one ds at a time.

* ``batch_1d_1d``       left ds ⋈ right ds, key equality only
* ``batch_1d_2d``       left ds ⋈ right ds and the neighbouring day(s) the window reaches into
                        (ds+1 for a positive upper bound, ds−1 for a negative lower bound), key only
* ``batch_1d_windowed`` left ds ⋈ right ds, restricted to the spec's window
* ``reference``         left ds ⋈ every right ds the window reaches, restricted to the window
                        (see :mod:`jobs.join.variants`)

The core (:func:`jobs.join.conditions.join_events`) is DataFrame in, DataFrame out, and the
streaming join projects its output through the same columns, so every variant has one shape.

Run one ds::

    joinshift batch --ds 2026-11-20
"""

from __future__ import annotations

import logging
from datetime import date

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.join.conditions import join_events
from jobs.join.variants import DAILY_VARIANTS, is_windowed, missing_days, right_days
from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.storage import delta_io
from jobs.storage.tables import Tables

log = logging.getLogger("joinshift.batch")


def run_variant(spark: SparkSession, spec: JoinSpec, variant: str, ds: date, s: Settings | None = None) -> int:
    """I/O shell: read landed partitions, join, replace the output's ds partition. Returns rows written."""
    tables = Tables.of(spec, s)
    days = right_days(spec, variant, ds)
    missing = missing_days(days, landed_days(spark, tables, "right"))
    if missing:
        raise RuntimeError(
            f"{variant} for ds={ds} needs right-stream partitions {', '.join(map(str, missing))}, "
            "which have not landed yet; land them first"
        )
    left = delta_io.read_table(spark, tables.landed("left")).where(F.col("ds") == F.lit(ds))
    right = delta_io.read_table(spark, tables.landed("right")).where(F.col("ds").isin(days))
    out = join_events(left, right, spec, windowed=is_windowed(variant))
    delta_io.replace_partitions(out, tables.output(variant), {"ds": [ds]})
    n = delta_io.read_table(spark, tables.output(variant)).where(F.col("ds") == F.lit(ds)).count()
    log.info("%s ds=%s: %d rows from right days %s", variant, ds, n, [str(d) for d in days])
    return n


def landed_days(spark: SparkSession, tables: Tables, side: str) -> list[date]:
    """Partitions the landing job has completed for a side (from the landing log)."""
    if not delta_io.table_exists(spark, tables.landing_log):
        return []
    rows = (
        spark.read.format("delta")
        .load(tables.landing_log)
        .where(F.col("side") == side)
        .select("ds")
        .distinct()
        .collect()
    )
    return sorted(r.ds for r in rows)


def ready_variants(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> list[str]:
    """The daily variants whose right-stream partitions for ``ds`` have all landed."""
    landed = landed_days(spark, Tables.of(spec, s), "right")
    return [v for v in DAILY_VARIANTS if not missing_days(right_days(spec, v, ds), landed)]
