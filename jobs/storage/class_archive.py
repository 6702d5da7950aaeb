"""Write the driver JVM's class-data archive (AppCDS) that :func:`jobs.storage.spark.class_archive_options`
maps into every later driver: set-up runs this once (``build/setup.sh``).

A child process starts a driver with ``-XX:ArchiveClassesAtExit``, runs what joinshift's steps
run (Delta writes, reads and a MERGE, JSON parsing, a streaming stateful join with RocksDB state
and a ``foreachBatch`` sink), and exits: the JVM writes the classes it loaded. A later driver
maps them instead of reading and verifying them from the jars. Nothing depends on it: without
the archive a driver starts as before.

    python -m jobs.storage.class_archive          # write it when missing (set-up)
    python -m jobs.storage.class_archive --force  # write it again
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Archives of other JDKs or jar sets kept beside this one (~200 MB each).
KEEP = 2


def _exercise(root: str, archive: str) -> None:
    """In the child: the driver that dumps its classes at exit."""
    from pyspark.sql import functions as F

    from jobs.settings import settings
    from jobs.storage import delta_io
    from jobs.storage.spark import driver_java_options, get_spark

    s = settings()
    dump = driver_java_options(
        s, "class-archive", f"-XX:ArchiveClassesAtExit={archive}", "-Xlog:cds*=off", use_archive=False
    )
    spark = get_spark("joinshift-class-archive", s, {"spark.driver.extraJavaOptions": dump})
    events = (
        spark.range(2000)
        .withColumn("k", (F.col("id") % 50).cast("string"))
        .withColumn("ts", F.timestamp_seconds(F.lit(1795000000) + F.col("id")))
        .withColumn("ds", F.to_date("ts"))
        .withColumn("json", F.to_json(F.struct("id", "k", "ts")))
    )
    parsed = events.select(F.from_json("json", "id long, k string, ts timestamp").alias("e"), "ds").select("e.*", "ds")
    table = os.path.join(root, "events")
    delta_io.replace_partitions(parsed, table, {"ds": [r.ds for r in parsed.select("ds").distinct().collect()]})
    delta_io.insert_new(parsed.limit(10), table, ["id"])
    left = spark.readStream.format("delta").load(table).withWatermark("ts", "1 hour").dropDuplicates(["id", "ts"])
    right = (
        spark.readStream.format("delta")
        .load(table)
        .select(F.col("k").alias("rk"), F.col("ts").alias("rts"))
        .withWatermark("rts", "1 hour")
    )
    joined = left.join(right, F.expr("k = rk AND rts BETWEEN ts AND ts + INTERVAL 10 MINUTES"), "leftOuter")
    out = os.path.join(root, "joined")
    query = (
        joined.writeStream.option("checkpointLocation", os.path.join(root, "checkpoint"))
        .foreachBatch(lambda batch, batch_id: batch.write.format("delta").mode("append").save(out))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.read.format("delta").load(out).groupBy("k").count().collect()
    spark.stop()


def write(force: bool = False) -> Path | None:
    """Write the archive for this JVM and jar set unless it exists; its path, or None when this JVM
    could not write one (set-up goes on: drivers then start without it)."""
    from jobs.settings import settings
    from jobs.storage.spark import class_archive

    archive = class_archive(settings())
    if archive.exists() and not force:
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    # other JDKs' or jar sets' (another checkout sharing the cache may use them): keep the newest
    for old in sorted(archive.parent.glob("spark-driver-*.jsa"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
        old.unlink(missing_ok=True)
    partial = archive.with_suffix(".partial")
    with tempfile.TemporaryDirectory(prefix="joinshift-class-archive-") as root:
        env = {**os.environ, "JOINSHIFT_STORAGE_ROOT": root, "JOINSHIFT_LOG_DIR": root, "JOINSHIFT_SPARK_REMOTE": ""}
        code = "import sys; from jobs.storage.class_archive import _exercise; _exercise(sys.argv[1], sys.argv[2])"
        res = subprocess.run([sys.executable, "-c", code, root, str(partial)], env=env, capture_output=True, text=True)
    for _ in range(50):  # the JVM writes the archive as it exits, after the Python child returned
        if partial.exists() and partial.stat().st_size > 0 and _settled(partial):
            break
        time.sleep(0.2)
    if res.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"class archive not written ({tail}): Spark drivers start without it", file=sys.stderr)
        return None
    partial.rename(archive)
    return archive


def _settled(path: Path) -> bool:
    size = path.stat().st_size
    time.sleep(0.5)
    return path.stat().st_size == size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.storage.class_archive", description=__doc__.split("\n\n")[0])
    p.add_argument("--force", action="store_true", help="write it again even when it exists")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        archive = write(args.force)
    except (RuntimeError, ValueError) as exc:  # no jars yet, a settings error: one line, no archive
        print(f"class archive not written ({exc})", file=sys.stderr)
        return 1
    if archive is not None:
        print(f"{archive} ({archive.stat().st_size // 2**20} MB, {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
