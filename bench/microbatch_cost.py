"""Where a micro-batch's fixed cost goes: the streaming join with small micro-batches, its
progress durations (Spark's ``durationMs``) and the exactly-once sink's Delta append timed inside
``foreachBatch``, one row per configuration, in one run on the same topics.

Configurations (``--variant``, repeatable; default all): ``product`` (joinshift's settings),
``hdfs-state`` (the in-memory HDFS-backed state store instead of RocksDB), ``no-aqe``
(adaptive query execution off), ``delta-snapshot-50`` (Delta's log replay in its default 50 tasks
instead of the local driver's one per core), ``join-state-v3`` (the join's four state stores as
column families of one RocksDB), ``filecontext-checkpoint`` (Spark's default checkpoint
file manager, FileContext's, instead of the FileSystem one a local storage root uses). Each runs
the same backlog twice in one warm JVM; the second run's batches 4.. are the steady state reported
(medians).

    python -m bench.microbatch_cost [--left-events 2000] [--max-offsets 200] [--variant product]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from bench.scratch import default_spec, publish_one_day, scratch_settings
from jobs.settings import PROJECT_ROOT

VARIANTS: dict[str, dict[str, str]] = {
    "product": {},
    "hdfs-state": {},  # the spec's streaming.state_store: memory (STATE_STORES), which the stream sets itself
    "no-aqe": {"spark.sql.adaptive.enabled": "false"},
    "delta-snapshot-50": {"spark.databricks.delta.snapshotPartitions": "50"},
    "join-state-v3": {"spark.sql.streaming.join.stateFormatVersion": "3"},
    "filecontext-checkpoint": {
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        )
    },
}
#: Variants that change the spec's state store rather than a setting (the stream takes the spec's).
STATE_STORES = {"hdfs-state": "memory"}
STEPS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.microbatch_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=2000, help="left events in the one generated day")
    p.add_argument("--max-offsets", type=int, default=200, help="maxOffsetsPerTrigger per topic (small batches)")
    p.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="configurations to run (default all)")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-microbatch"), help="scratch folder (wiped)")
    args = p.parse_args(argv)

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.spec import StateStore
    from jobs.steps.stream import start_streaming_join
    from jobs.storage import delta_io
    from jobs.storage.spark import get_spark

    sink_s: list[float] = []
    append = delta_io.append_batch

    def timed_append(*a, **k):  # the sink's Delta append, inside foreachBatch
        t0 = time.monotonic()
        try:
            return append(*a, **k)
        finally:
            sink_s.append(time.monotonic() - t0)

    delta_io.append_batch = timed_append

    root = Path(args.root)
    s = scratch_settings(root)
    spec = default_spec(args.max_offsets)
    rows = []
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    try:
        publish_one_day(spec, bootstrap, args.left_events)
        spark = get_spark("joinshift-bench-microbatch", s)
        defaults = {k: spark.conf.get(k, None) for conf in VARIANTS.values() for k in conf}
        for i, name in enumerate(args.variant or list(VARIANTS)):  # a variant may be named again: A/B/A/B
            for k, v in {**defaults, **VARIANTS[name]}.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)
            store = {"state_store": StateStore(STATE_STORES.get(name, "rocksdb"))}
            run_spec = spec.model_copy(update={"streaming": spec.streaming.model_copy(update=store)})
            for run in range(2):  # the first pays the warm-up of this configuration
                sink_s.clear()
                rs = dataclasses.replace(s, storage_root=str(root / "storage" / f"{i}_{name}_{run}"))
                t0 = time.monotonic()
                (q,) = start_streaming_join(
                    spark, run_spec, bootstrap=bootstrap, s=rs, available_now=True, quarantine=False
                )
                q.awaitTermination()
                wall = time.monotonic() - t0
            steady = q.recentProgress[3:]
            row = {
                "variant": name,
                "micro_batches": len(q.recentProgress),
                "wall_s": round(wall, 1),
                "input_rows_per_batch": statistics.median(p.numInputRows for p in steady),
                **{f"{k}_ms": statistics.median(p.durationMs.get(k, 0) for p in steady) for k in STEPS},
                "sink_append_ms": round(1000 * statistics.median(sink_s[3:] or [0])),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
        spark.stop()
    finally:
        broker.stop()
    print("| variant | batches | rows/batch | " + " | ".join(STEPS) + " | sink append |")
    print("|---" * (len(STEPS) + 4) + "|")
    for r in rows:
        cells = [str(r["micro_batches"]), f"{r['input_rows_per_batch']:.0f}"]
        cells += [f"{r[f'{k}_ms']:.0f} ms" for k in STEPS] + [f"{r['sink_append_ms']} ms"]
        print(f"| {r['variant']} | " + " | ".join(cells) + " |")
    print(json.dumps({"command": "python -m bench.microbatch_cost " + " ".join(argv or sys.argv[1:])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
