"""A lever of issue 13 measured and not kept: read each topic once, by folding the quarantine
query into the join's (one query over the join's output unioned with the bad records, tagged,
split in ``foreachBatch``), against the product's two queries (join, quarantine), on the same
backlog in one run: wall time, the driver's and JVM's CPU, micro-batches, Kafka sources, and
equal output and quarantine rows. Alternating rounds, the first is the warm-up.

    python -m bench.quarantine_in_join [--max-offsets 400] [--left-events 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from datetime import date
from pathlib import Path

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.quarantine_in_join", description=__doc__.split("\n\n")[0])
    p.add_argument("--max-offsets", type=int, default=400, help="maxOffsetsPerTrigger per topic")
    p.add_argument("--left-events", type=int, default=4000, help="left events in the one generated day")
    p.add_argument("--rounds", type=int, default=3, help="rounds of both (the first warms up)")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-quarantine"), help="scratch folder (wiped)")
    args = p.parse_args(argv)

    import psutil
    from pyspark.sql import functions as F

    from jobs.join.conditions import join_streams
    from jobs.join.records import good_events, parse_records, quarantine_rows
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.steps.stream import JoinSink, start_streaming_join
    from jobs.storage import delta_io, kafka
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    root = Path(args.root)
    s = scratch_settings(root)
    spec = default_spec(args.max_offsets)

    def cpu_s() -> float:  # this process and its children (the driver JVM)
        me = psutil.Process()
        return sum(sum(c.cpu_times()[:2]) for c in me.children(recursive=True)) + sum(me.cpu_times()[:2])

    def one_query(spark, bootstrap, rs):
        limit = spec.streaming.max_offsets_per_trigger
        parsed = {
            side: parse_records(
                kafka.read_stream(spark, bootstrap, spec.side(side).topic, limit, "earliest"), spec.side(side), spec
            )
            for side in ("left", "right")
        }
        joined = join_streams(good_events(parsed["left"], spec.left), good_events(parsed["right"], spec.right), spec)
        bad = quarantine_rows(parsed["left"], spec.left, "stream").unionByName(
            quarantine_rows(parsed["right"], spec.right, "stream")
        )
        out = joined.select(F.struct(*joined.columns).alias("o"), F.lit(None).cast(bad.schema).alias("b"))
        quarantined = bad.select(F.lit(None).cast(joined.schema).alias("o"), F.struct(*bad.columns).alias("b"))
        tables = Tables.of(spec, rs)
        sink = JoinSink(spec, tables)
        append_bad = delta_io.BatchAppender(tables.quarantine, lambda: "bench")

        def write(batch, batch_id):
            batch = batch.persist()
            try:
                sink(batch.where("o IS NOT NULL").select("o.*"), batch_id)
                q = batch.where("b IS NOT NULL").select("b.*")
                if not q.isEmpty():
                    append_bad(q, batch_id)
            finally:
                batch.unpersist()

        return (
            out.unionByName(quarantined)
            .writeStream.option("checkpointLocation", tables.checkpoint("stream_join"))
            .foreachBatch(write)
            .trigger(availableNow=True)
            .start()
        )

    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    try:
        wl = generate(WorkloadParams(left_events_per_day=args.left_events, days=1, start_date=date(2026, 11, 19)), spec)
        for st in (spec.left, spec.right):
            kafka.create_topic(bootstrap, st.topic)
        publish(wl.records, bootstrap)
        spark = get_spark("joinshift-bench-quarantine", s)
        for run in range(args.rounds):
            for kind in ("two queries", "one query"):
                rs = dataclasses.replace(s, storage_root=str(root / "storage" / f"{kind[:3]}{run}"))
                c0, t0 = cpu_s(), time.monotonic()
                if kind == "two queries":
                    queries = start_streaming_join(spark, spec, bootstrap=bootstrap, s=rs, available_now=True)
                else:
                    queries = (one_query(spark, bootstrap, rs),)
                for q in queries:
                    q.awaitTermination()
                wall, cpu = time.monotonic() - t0, cpu_s() - c0
                sources = len(queries[0].lastProgress["sources"]) if queries[0].lastProgress else 0
                tables = Tables.of(spec, rs)
                n_out = spark.read.format("delta").load(tables.output("stream")).count()
                n_bad = spark.read.format("delta").load(tables.quarantine).count()
                print(
                    f"round {run}{' (warm-up)' if run == 0 else ''} {kind:12s} wall {wall:5.1f} s, CPU {cpu:5.1f} s, "
                    f"{len(queries[0].recentProgress)} micro-batches, {sources} Kafka sources, "
                    f"{n_out} output rows, {n_bad} quarantined",
                    flush=True,
                )
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
