"""What landing a ds costs: ``land_ds`` per side and day against its own parse alone (``read_ds``
counted: the Kafka read, parsing, the duplicate checks; nothing written), in one warm JVM.

A generated workload (the demo's size by default) is published once into the bench's own broker;
every arrival day is landed per side in two rounds, the first paying the JVM's warm-up; the second
round's medians are reported. ``landing ÷ parse`` is what the Delta writes (landed table,
quarantine, landing log) and the counts add to the parse.

    python -m bench.landing [--left-events 20000] [--days 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.landing", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=20000, help="left events per generated day")
    p.add_argument("--days", type=int, default=2, help="generated days (their arrivals span one day more)")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-landing"), help="scratch folder (wiped)")
    args = p.parse_args(argv)

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.steps.landing import land_ds, read_ds
    from jobs.storage import kafka
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    s = scratch_settings(Path(args.root))
    spec = default_spec()
    tables = Tables.of(spec, s)
    first = date(2026, 11, 19)
    days = [first + timedelta(days=i) for i in range(args.days + 1)]
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    timings: dict[str, list[float]] = {"parse": [], "landing": []}
    try:
        wl = generate(WorkloadParams(left_events_per_day=args.left_events, days=args.days, start_date=first), spec)
        for st in (spec.left, spec.right):
            kafka.create_topic(bootstrap, st.topic)
        publish(wl.records, bootstrap)
        spark = get_spark("joinshift-bench-landing", s, throughput=True)
        for round_ in range(2):  # the first pays the warm-up
            for ds in days:
                for side in ("left", "right"):
                    t0 = time.monotonic()
                    read_ds(spark, spec, side, ds, tables, bootstrap).count()
                    parse_s = time.monotonic() - t0
                    t0 = time.monotonic()
                    result = land_ds(spark, spec, side, ds, s, bootstrap)
                    land_s = time.monotonic() - t0
                    print(
                        json.dumps({"round": round_, "ds": str(ds), "side": side, "records": result.records,
                                    "parse_s": round(parse_s, 2), "landing_s": round(land_s, 2)}),
                        file=sys.stderr,
                    )  # fmt: skip
                    if round_:
                        timings["parse"].append(parse_s)
                        timings["landing"].append(land_s)
        spark.stop()
    finally:
        broker.stop()
    parse, landing = statistics.median(timings["parse"]), statistics.median(timings["landing"])
    print("| per side and ds (medians, warm) | parse alone | landing | landing ÷ parse |")
    print("|---|---|---|---|")
    print(f"| {len(timings['landing'])} landings | {parse:.2f} s | {landing:.2f} s | {landing / parse:.1f}× |")
    print(json.dumps({"command": "python -m bench.landing " + " ".join(argv or sys.argv[1:])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
