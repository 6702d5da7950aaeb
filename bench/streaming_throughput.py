"""Streaming join throughput against the Kafka -> Delta limit, and batch join cost per million.

In one run, on the same generated data in a real broker:

1. **pass-through**: Kafka -> parse -> Delta append for both topics (the most any streaming job
   on this path can do), events/s;
2. **streaming join**: the product's stream-stream interval join, Kafka -> Delta, events/s;
3. their ratio (join ÷ pass-through);
4. **batch join**: ``batch_1d_windowed`` over one landed ds, seconds per million left events.

Both streaming runs read the same backlog with the same ``maxOffsetsPerTrigger``, so each is a
sequence of equal-sized micro-batches (sustained rate, not one giant batch). They alternate, one
warm-up round first (JIT, class loading), then ``--repeat`` timed rounds; medians are reported.

    python -m bench.streaming_throughput [--left-events 100000] [--batch-records 50000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.streaming_throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=100_000, help="left events per day (one day)")
    p.add_argument("--batch-records", type=int, default=50_000, help="maxOffsetsPerTrigger per source")
    p.add_argument("--repeat", type=int, default=2, help="timed rounds after one warm-up round (median)")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench"), help="scratch folder (wiped)")
    args = p.parse_args(argv)

    from pyspark.sql import functions as F

    from jobs.join.conditions import join_events
    from jobs.join.records import good_events, parse_records
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.steps.landing import land_day
    from jobs.steps.stream import start_streaming_join
    from jobs.storage import delta_io
    from jobs.storage.kafka import create_topic, read_stream
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    root = Path(args.root)
    s = scratch_settings(root)
    spec = default_spec(args.batch_records)
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    try:
        day = date(2026, 11, 19)
        wl = generate(WorkloadParams(left_events_per_day=args.left_events, days=1, start_date=day), spec)
        for stream in (spec.left, spec.right):
            create_topic(bootstrap, stream.topic)
        t0 = time.monotonic()
        publish(wl.records, bootstrap)
        publish_s = time.monotonic() - t0
        n_records = len(wl.records)
        print(f"published {n_records:,} records in {publish_s:.1f}s", file=sys.stderr)

        spark = get_spark("joinshift-bench", s)
        spark.conf.set("spark.sql.shuffle.partitions", str(spec.streaming.shuffle_partitions))

        def passthrough(run: int) -> float:
            """Parse both topics and append to Delta, batched like the join."""
            out = str(root / "storage" / f"passthrough_{run}")
            streams = [
                good_events(
                    parse_records(
                        read_stream(spark, bootstrap, spec.side(side).topic, args.batch_records), spec.side(side), spec
                    ),
                    spec.side(side),
                ).select(F.col(spec.side(side).id).alias("id"), "ds")
                for side in ("left", "right")
            ]
            t0 = time.monotonic()
            q = (
                streams[0]
                .unionByName(streams[1])
                .writeStream.format("delta")
                .outputMode("append")
                .option("checkpointLocation", out + "_checkpoint")
                .partitionBy("ds")
                .trigger(availableNow=True)
                .start(out)
            )
            q.awaitTermination()
            return time.monotonic() - t0

        def stream_join(run: int) -> tuple[float, int]:
            """The product's streaming join, same backlog, own storage root per run."""
            rs = dataclasses.replace(s, storage_root=str(root / "storage" / f"join_{run}"))
            t0 = time.monotonic()
            (q,) = start_streaming_join(spark, spec, bootstrap=bootstrap, s=rs, available_now=True, quarantine=False)
            q.awaitTermination()
            return time.monotonic() - t0, len(q.recentProgress)

        # alternate, and drop the first round: it pays the JVM's warm-up for both
        rounds = []
        for run in range(args.repeat + 1):
            pt = passthrough(run)
            js, join_batches = stream_join(run)
            print(
                f"round {run}{' (warm-up)' if run == 0 else ''}: pass-through {pt:.1f}s, stream join {js:.1f}s",
                file=sys.stderr,
            )
            rounds.append((pt, js))
        timed = rounds[1:]
        passthrough_s = statistics.median(pt for pt, _ in timed)
        join_s = statistics.median(js for _, js in timed)

        # 3. batch: land the day, time batch_1d_windowed on it
        land_day(spark, spec, day, s, bootstrap)
        tables = Tables.of(spec, s)
        left = delta_io.read_table(spark, tables.landed("left")).where(F.col("ds") == day).cache()
        right = delta_io.read_table(spark, tables.landed("right")).where(F.col("ds") == day).cache()
        n_left = left.count()
        right.count()
        sink = str(root / "storage" / "batch_out")
        join_events(left, right, spec, windowed=True).write.format("noop").mode("overwrite").save()  # warm-up
        t0 = time.monotonic()
        join_events(left, right, spec, windowed=True).write.format("delta").mode("overwrite").save(sink)
        batch_s = time.monotonic() - t0

        result = {
            "records": n_records,
            "left_events": n_left,
            "max_offsets_per_trigger": args.batch_records,
            "timed_rounds": len(timed),
            "passthrough_events_per_s": round(n_records / passthrough_s),
            "stream_join_events_per_s": round(n_records / join_s),
            "stream_join_micro_batches": join_batches,
            "stream_join_vs_passthrough": round(passthrough_s / join_s, 3),
            "batch_1d_windowed_s": round(batch_s, 2),
            "batch_1d_windowed_s_per_million_left": round(batch_s / n_left * 1e6, 2),
            "command": "python -m bench.streaming_throughput " + " ".join(argv or sys.argv[1:]),
        }
        print(json.dumps(result, indent=2))
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
