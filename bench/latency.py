"""Event -> output latency of the continuous stream, live: records are published at their arrival
time on the wall clock (no replay, no backlog) and the join runs continuously with its trigger
interval; each output row's latency is ``output_latency_s`` (``emitted_at`` minus the row's latest
event time: the definition the budget, ``recommend --verify`` and the gate use).

The workload is the generator's day for *today* (the spec's zone), cut to the next ``--minutes``
of arrival time from now: a server-side left stream (on time) and client clicks arriving seconds
to hours late. The spec is the default one with a window and watermarks short enough that the
left-outer rows with no match are emitted within the run: left watermark ``--left-watermark``
(server-side: on time), right ``--right-watermark``, window ``[-upper, +upper]``.

Also reported (``arrival_*``): the same from the Kafka record timestamp (the arrival) of the
record that completed the row (the later of the pair; the left one for a row with no match): the
pipeline's own share, without the clients' delay in sending their events.

Goal (issue 13, item 4): p99 <= 2 x trigger interval + the window's upper bound + the watermark
that applies (the right side's: a match or a non-match is final once the right watermark passes
the left event time + upper). Measured over the left events whose outcome is final before the
publishing stops.

    python -m bench.latency [--minutes 5] [--trigger 5s] [--left-events-per-day 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT


def _seconds(text: str) -> float:
    from jobs.spec.duration import duration_seconds

    return duration_seconds(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5, help="minutes of live arrivals published")
    p.add_argument("--trigger", default="5s", help="the stream's trigger interval")
    p.add_argument("--upper", default="1m", help="the window's upper bound (lower = -upper)")
    p.add_argument("--left-watermark", default="0s", help="left (server-side) watermark delay")
    p.add_argument("--right-watermark", default="30s", help="right (client-side) watermark delay")
    p.add_argument("--left-events-per-day", type=int, default=1_000_000, help="the generated day's left events")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-latency"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    trigger, upper = _seconds(args.trigger), _seconds(args.upper)
    wm_left, wm_right = _seconds(args.left_watermark), _seconds(args.right_watermark)
    settle = upper + wm_right + 2 * trigger  # a left event's outcome is final this long after it
    if args.minutes * 60 <= settle + 30:
        p.error(f"--minutes must leave more than {settle + 30:.0f} s after the window and watermark settle")

    from pyspark.sql import functions as F

    from jobs.join.columns import ARRIVAL_TIME, EMITTED_AT, col_name, output_latency_s
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.steps.stream import start_streaming_join
    from jobs.storage import delta_io, kafka
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams

    s = scratch_settings(args.root)
    base = default_spec()
    spec = base.with_window(timedelta(seconds=-upper), timedelta(seconds=upper)).model_copy(
        update={
            "pipeline": "bench_latency",
            "left": base.left.model_copy(update={"watermark_delay": timedelta(seconds=wm_left)}),
            "right": base.right.model_copy(update={"watermark_delay": timedelta(seconds=wm_right)}),
        }
    )
    now = datetime.now(UTC)
    print(f"generating today's workload ({args.left_events_per_day:,} left events a day)", flush=True)
    wl = generate(WorkloadParams(left_events_per_day=args.left_events_per_day, days=1, start_date=now.date()), spec)
    start_ms = int((now.timestamp() + 20) * 1000)  # after the broker and the query are up
    end_ms = start_ms + int(args.minutes * 60_000)
    records = wl.records[(wl.records.arrival_ms >= start_ms) & (wl.records.arrival_ms < end_ms)]
    records = records.sort_values("arrival_ms", kind="stable").reset_index(drop=True)
    if records.empty:
        p.error("no records arrive in the next minutes of today's workload (past midnight?): run it again later")

    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    try:
        for st in (spec.left, spec.right):
            kafka.create_topic(bootstrap, st.topic)
        spark = get_spark("joinshift-bench-latency", s)
        (query,) = start_streaming_join(
            spark, spec, bootstrap=bootstrap, s=s, trigger_interval=f"{trigger:g} seconds", quarantine=False
        )
        sent = _publish_live(records, bootstrap)
        time.sleep(2 * trigger)  # the last records' micro-batch
        query.stop()
        out = delta_io.read_table(spark, Tables.of(spec, s).output("stream"))
        left_t = F.col(col_name("left", spec.left.event_time))
        final_before = datetime.fromtimestamp((end_ms / 1000) - settle, UTC)
        measured = out.where(left_t >= F.lit(datetime.fromtimestamp(start_ms / 1000, UTC))).where(
            left_t < F.lit(final_before)
        )
        la, ra = F.col(col_name("left", ARRIVAL_TIME)), F.col(col_name("right", ARRIVAL_TIME))
        since_arrival = (F.unix_micros(F.col(EMITTED_AT)) - F.unix_micros(F.greatest(la, F.coalesce(ra, la)))) / 1e6
        rows = measured.select(
            output_latency_s(spec).alias("latency"),
            since_arrival.alias("since_arrival"),
            F.col(col_name("right", spec.right.event_time)).isNull().alias("unmatched"),
        ).collect()
        spark.stop()
    finally:
        broker.stop()

    bound = 2 * trigger + upper + wm_right
    result: dict[str, object] = {
        "command": "python -m bench.latency " + " ".join(argv or sys.argv[1:]),
        "replay mode": "live: records published at their arrival time on the wall clock, continuous trigger",
        "records_published": sent,
        "trigger_s": trigger,
        "bound_s": bound,
    }
    stats: dict[str, dict[str, float]] = {}
    for name, sel in (("matched", False), ("unmatched", True), ("all", None)):
        picked = [r for r in rows if sel is None or r.unmatched == sel]
        if picked:
            stats[name] = {"rows": len(picked)}
            for measure, label in (("latency", ""), ("since_arrival", "arrival_")):
                lat = sorted(getattr(r, measure) for r in picked)
                stats[name] |= {
                    f"{label}p50_s": round(statistics.median(lat), 2),
                    f"{label}p99_s": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2),
                    f"{label}max_s": round(lat[-1], 2),
                }
    result.update(stats)
    result["goal_met"] = "all" in stats and stats["all"]["p99_s"] <= bound
    out_file = Path(args.root) / "result.json"
    out_file.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def _publish_live(records, bootstrap: str) -> int:
    """Send each record when the wall clock reaches its arrival time (Kafka timestamp = arrival),
    through the workload publisher with one producer."""
    from jobs.storage import kafka
    from jobs.workload.publisher import publish

    producer = kafka.producer(bootstrap, linger_ms=5)
    arrivals = records["arrival_ms"].to_numpy()
    i, n = 0, len(records)
    try:
        while i < n:
            due = int(arrivals.searchsorted(time.time() * 1000, side="right"))
            if due > i:
                publish(records.iloc[i:due], bootstrap, producer=producer)
                i = due
            else:
                time.sleep(min(0.05, max(0.0, (arrivals[i] - time.time() * 1000) / 1000)))
    finally:
        producer.close()
    return n


if __name__ == "__main__":
    sys.exit(main())
