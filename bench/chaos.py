"""Chaos for the supervised streaming join: SIGKILL the stream process at random moments (and
optionally bounce the Kafka broker), let :func:`jobs.operate.supervisor.supervise` restart it from its
checkpoint, and check the Delta output equals one uninterrupted ``availableNow`` run exactly.

Every kill lands shortly after the restarted process's first output commit (the output Delta
table's version grew) plus a seeded random 0-1.5 s: i.e. during the progress/offset commit or
the next micro-batch (mid foreachBatch, mid Delta commit). Measured per kill: seconds from the
SIGKILL to the output Delta table's next new version (the first new output rows after the
automatic restart). The harness is :mod:`jobs.local.chaos`; this is its command line.

    python -m bench.chaos --kills 20 [--left-events 1000] [--max-offsets 40] [--seed 2026]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from bench.scratch import default_spec, scratch_settings
from jobs.local.chaos import (
    chaos_run,
    isolated_spec,
    output_rows,
    publish_workload,
    reference_output,
)
from jobs.settings import PROJECT_ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--left-events", type=int, default=1000, help="left events (one day): enough input for 20 kills")
    p.add_argument("--max-offsets", type=int, default=40, help="maxOffsetsPerTrigger")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--no-broker-bounce", action="store_true")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench" / "chaos"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    command = "python -m bench.chaos " + " ".join(argv if argv is not None else sys.argv[1:])

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.spec import write_spec
    from jobs.storage.spark import get_spark

    root = Path(args.root)
    base_s = scratch_settings(root, spark_driver_memory="1g")
    ref_s = dataclasses.replace(base_s, storage_root=str(root / "reference"))
    run_s = dataclasses.replace(base_s, storage_root=str(root / "supervised"))
    base = default_spec()
    spec = isolated_spec(base, "chaos_bench", args.max_offsets)
    spec_path = write_spec(spec, root / "chaos_bench.yaml")
    broker = EmbeddedKafka(base_s)
    bootstrap = broker.start()
    spark = None
    try:
        n = publish_workload(base, spec, bootstrap, args.left_events, args.seed)
        spark = get_spark("joinshift-chaos-bench", ref_s, extra_conf={"spark.sql.shuffle.partitions": "2"})
        t = time.monotonic()
        expected = reference_output(spark, isolated_spec(base, "chaos_bench", None), bootstrap, ref_s)
        ref_seconds = time.monotonic() - t
        res = chaos_run(
            spec,
            spec_path,
            run_s,
            bootstrap,
            kills=args.kills,
            seed=args.seed,
            broker=None if args.no_broker_bounce else broker,
            broker_bounce_after=None if args.no_broker_bounce else max(1, args.kills // 2),
        )
        got = output_rows(spark, spec, run_s)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    rec = res["recover_s"]
    summary = {
        "command": command,
        "records": n,
        "reference_rows": len(expected),
        "reference_seconds": round(ref_seconds, 1),
        "kills": res["kills"],
        "restarts": res["restarts"],
        "broker_bounced": res["broker_bounced"],
        "output_rows": len(got),
        "duplicates": len(got) - len(set(got)),
        "output_equal": got == expected,
        "kill_to_new_output_s": {
            "n": len(rec),
            "mean": round(statistics.mean(rec), 1) if rec else None,
            "median": round(statistics.median(rec), 1) if rec else None,
            "max": round(max(rec), 1) if rec else None,
        },
        "chaos_seconds": res["seconds"],
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["output_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
