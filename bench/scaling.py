"""How the streaming join scales, in one run on the embedded broker (issue 13, item 5):

1. events/s vs the state's shuffle partitions (``--partitions``, default 1,2,4) at one size;
2. events/s vs the day's size (``--sizes`` left events a day, default 100k,1M,5M) at the spec's
   partitions;
3. the join's state vs the window's span (``--spans``): peak state rows and bytes over the run's
   micro-batches (Spark's ``stateOperators``: rows and memory used of the de-duplication and join
   stores, summed over operators).

Every point is the product's join (``start_streaming_join``, ``availableNow``, the exactly-once
Delta sink, no quarantine query) from a fresh checkpoint over a backlog in Kafka read in
micro-batches of ``--batch-records`` per topic; events/s = Kafka records read ÷ wall time. A
backlog rate is an upper bound on what a live stream sustains at the same size (it never waits
for a trigger). One warm-up run first. A table per part, a JSON result and a plot.

    python -m bench.scaling [--sizes 100000,1000000,5000000] [--partitions 1,2,4] [--spans ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT

DAY = date(2026, 11, 19)


def state_peak(progress: list[dict[str, Any]]) -> dict[str, int]:
    """The largest per-batch sums, over a run's progress records, of the state's rows, its memory
    (RocksDB's ``memoryUsedBytes``) and its files (``rocksdbSstFileSize``), all operators."""

    def peak(value) -> int:
        return max((sum(value(op) for op in p.get("stateOperators", [])) for p in progress), default=0)

    return {
        "state_rows": peak(lambda op: op.get("numRowsTotal", 0)),
        "state_bytes": peak(lambda op: op.get("memoryUsedBytes", 0)),
        "state_sst_bytes": peak(lambda op: op.get("customMetrics", {}).get("rocksdbSstFileSize", 0)),
    }


def parse_span(text: str) -> tuple[timedelta, timedelta]:
    """``-3h..+30m`` -> (lower, upper)."""
    from jobs.spec.duration import parse_duration

    lower, upper = text.split("..")
    return parse_duration(lower), parse_duration(upper)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,1000000,5000000", help="left events a day, one point each")
    p.add_argument("--partitions", default="1,2,4", help="shuffle (state) partitions, one point each")
    p.add_argument("--partitions-size", type=int, default=200_000, help="left events a day for parts 1 and 3")
    p.add_argument("--spans", default="-30m..+30m,-3h..+30m,-6h..+1h", help="windows for part 3")
    p.add_argument("--batch-records", type=int, default=50_000, help="maxOffsetsPerTrigger per topic")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-scaling"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",")]
        partitions = [int(x) for x in args.partitions.split(",")]
        spans = [(x, *parse_span(x)) for x in args.spans.split(",")]
    except ValueError as exc:
        p.error(f"--sizes, --partitions and --spans are comma-separated lists ({exc})")

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.kafka import create_topic
    from jobs.storage.progress import JOIN_QUERY, read_progress, settle_log
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    root = Path(args.root)
    s = scratch_settings(root)
    base = default_spec(args.batch_records)
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    published: dict[int, tuple[Any, int]] = {}
    runs = 0

    def topics_of(n: int):
        """The spec on topics holding a day of ``n`` left events (generated and published once)."""
        if n not in published:
            spec = base.model_copy(
                update={
                    side: base.side(side).model_copy(update={"topic": f"{base.side(side).topic}_{n}"})
                    for side in ("left", "right")
                }
            )
            t0 = time.monotonic()
            wl = generate(WorkloadParams(left_events_per_day=n, days=1, start_date=DAY), base)
            records = wl.records.assign(
                topic=wl.records.topic.map({base.left.topic: spec.left.topic, base.right.topic: spec.right.topic})
            )
            del wl
            for st in (spec.left, spec.right):
                create_topic(bootstrap, st.topic)
            publish(records, bootstrap)
            print(f"{n:,} left events a day: {len(records):,} records published in {time.monotonic() - t0:.0f} s")
            published[n] = (spec, len(records))
        return published[n]

    def run(spec, label: str) -> dict[str, Any]:
        nonlocal runs
        runs += 1
        rs = dataclasses.replace(s, storage_root=str(root / "storage" / f"run{runs}"))
        t0 = time.monotonic()
        (q,) = start_streaming_join(spark, spec, bootstrap=bootstrap, s=rs, available_now=True, quarantine=False)
        q.awaitTermination()
        wall = time.monotonic() - t0
        log = Tables.of(spec, rs).progress_log(JOIN_QUERY)
        settle_log(log, q)
        progress = read_progress(log)
        records = sum(int(x.get("numInputRows", 0)) for x in progress)
        point = {
            "label": label,
            "records": records,
            "micro_batches": len(progress),
            "wall_s": round(wall, 1),
            "events_per_s": round(records / wall),
            **state_peak(progress),
        }
        print(json.dumps(point), flush=True)
        return point

    result: dict[str, Any] = {"command": "python -m bench.scaling " + " ".join(argv or sys.argv[1:])}
    try:
        spark = get_spark("joinshift-bench-scaling", s)
        spec_p, _ = topics_of(args.partitions_size)
        run(spec_p, "warm-up")
        result["partitions"] = [
            run(
                spec_p.model_copy(update={"streaming": spec_p.streaming.model_copy(update={"shuffle_partitions": n})}),
                f"{n} partitions",
            )
            for n in partitions
        ]
        result["spans"] = [run(spec_p.with_window(lower, upper), f"window {text}") for text, lower, upper in spans]
        result["sizes"] = [run(topics_of(n)[0], f"{n:,} left a day") for n in sizes]
        spark.stop()
    finally:
        broker.stop()

    for part in ("partitions", "spans", "sizes"):
        print(f"\n| {part} | records | micro-batches | wall | events/s | peak state rows | memory MB | files MB |")
        print("|---|---|---|---|---|---|---|---|")
        for x in result[part]:
            print(
                f"| {x['label']} | {x['records']:,} | {x['micro_batches']} | {x['wall_s']} s | {x['events_per_s']:,} "
                f"| {x['state_rows']:,} | {x['state_bytes'] / 2**20:.1f} | {x['state_sst_bytes'] / 2**20:.1f} |"
            )
    out = root / "result.json"
    out.write_text(json.dumps(result, indent=2))
    plot(result, root / "scaling.png")
    print(f"\nwritten {out} and {root / 'scaling.png'}")
    return 0


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, part, title in (
        (axes[0], "partitions", "events/s vs state partitions"),
        (axes[1], "sizes", "events/s vs left events a day"),
    ):
        xs = [x["label"].split(" ")[0] for x in result[part]]
        ys = [x["events_per_s"] for x in result[part]]
        ax.bar(xs, ys, color="#4c72b0")
        for i, y in enumerate(ys):
            ax.annotate(f"{y / 1000:.1f} k", (i, y), ha="center", va="bottom")
        ax.set_title(title)
        ax.set_ylabel("Kafka records per second")
    spans = result["spans"]
    xs = [x["label"].removeprefix("window ") for x in spans]
    at = range(len(spans))
    mem = [x["state_bytes"] / 2**20 for x in spans]
    axes[2].bar([i - 0.2 for i in at], mem, width=0.4, color="#c44e52", label="memory (RocksDB)")
    axes[2].bar([i + 0.2 for i in at], [x["state_sst_bytes"] / 2**20 for x in spans], width=0.4, label="files (SST)")
    for i, x in enumerate(spans):
        axes[2].annotate(f"{x['state_rows']:,} rows", (i, max(mem)), ha="center", va="bottom")
    axes[2].set_xticks(list(at), xs)
    axes[2].legend()
    axes[2].set_title("peak state (all operators) vs window span")
    axes[2].set_ylabel("MB")
    fig.suptitle(result["command"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
