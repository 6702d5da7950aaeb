"""What one small Delta partition overwrite costs (``delta_io.replace_partitions``, what landing,
the batch baselines and compare write with), by the number of tasks Delta rebuilds a table's file
list in (``spark.databricks.delta.snapshotPartitions``), in one warm JVM.

Delta's default is 50 tasks; joinshift's local driver uses one per core (``jobs.storage.spark``).
Each overwrite replaces one of three ds partitions of a 3,000-row table, as a daily job does.

    python -m bench.delta_overhead [--rows 3000] [--repeat 7] [--partitions 50,8,4,2,1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path

from bench.scratch import scratch_settings
from jobs.settings import PROJECT_ROOT

DAY = date(2026, 11, 19)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.delta_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=3000, help="rows in the table (three ds partitions)")
    p.add_argument("--repeat", type=int, default=7, help="overwrites timed per setting (the median is reported)")
    p.add_argument("--partitions", default="50,8,4,2,1", help="snapshotPartitions settings to time, in order")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-delta"), help="scratch folder (wiped)")
    args = p.parse_args(argv)

    from pyspark.sql import functions as F

    from jobs.storage import delta_io
    from jobs.storage.spark import get_spark

    s = scratch_settings(args.root)
    spark = get_spark("bench-delta", s, throughput=True)
    path = str(Path(s.storage_root) / "table")
    rows = (
        spark.range(args.rows)
        .withColumn("ds", F.date_add(F.lit(DAY), (F.col("id") % 3).cast("int")))
        .withColumn("v", F.rand(7))
        .persist()
    )
    rows.count()

    def overwrite(i: int) -> float:
        ds = DAY + timedelta(days=i % 3)
        t0 = time.monotonic()
        delta_io.replace_partitions(rows.where(F.col("ds") == F.lit(ds)), path, {"ds": [ds]})
        return time.monotonic() - t0

    for i in range(args.repeat):  # warm-up: JIT, the table's first versions
        overwrite(i)
    result: dict[str, float] = {}
    for n in args.partitions.split(","):
        spark.conf.set("spark.databricks.delta.snapshotPartitions", n)
        result[n] = statistics.median(overwrite(i) for i in range(args.repeat))
        print(f"snapshotPartitions={n:>3}: {result[n]:.2f} s per overwrite (median of {args.repeat})", flush=True)
    base, cores = result.get("50"), str(spark.sparkContext.defaultParallelism)
    if base and cores in result:
        print(f"one task per core ({cores}) vs Delta's default 50: {base / result[cores]:.1f}x faster")
    out = Path(args.root) / "result.json"
    out.write_text(json.dumps({"rows": args.rows, "repeat": args.repeat, "seconds": result}, indent=2))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
