"""How fast a replay rebuilds the streaming join's window from Kafka (paper §6.1, §7.3: a 3-hour
window rebuilt in about 9 minutes, ≈ 20×).

For each left-event rate, one generated day goes to its own pair of topics on an embedded broker
(only the records that arrived before the cut-over: the rebuild is what is timed, not live
traffic), then :func:`jobs.replay.replay` runs exactly as ``joinshift replay`` does: retention
check, offsets-for-times per partition, a fresh checkpoint, and an ``availableNow`` catch-up to
the cut-over. Reported per rate:

* ``rebuild_s``: wall time of ``replay()`` in a warm Spark session (plan + catch-up);
* ``window_span ÷ rebuild_s``: the paper's measure (our goal ≥ 30× at the generator's default
  rate, 20,000 left events a day); ``replayed_span ÷ rebuild_s`` counts the watermark delay too;
* records replayed, records/s, and the join state's rows per side afterwards (Spark's state data
  source), so the rebuilt window can be checked against what the cut-over needs;
* ``closing_batch``: whether the catch-up ended with a micro-batch without data (the bench's
  output table is empty before it, so not unless a ``spark_conf`` asks for it: ``jobs.operate.replay``);
* ``spark_start_s``: the cold Spark session of the run, which a ``joinshift replay`` CLI call pays
  on top.

    python -m bench.replay_rebuild [--left-events 20000,200000] [--cutover 2026-11-19T21:00:00Z]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.scratch import scratch_settings
from jobs.settings import PROJECT_ROOT

DEFAULT_CUTOVER = "2026-11-19T21:00:00Z"  # an hour after the generator's diurnal peak: the busiest window


def _parse_cutover(text: str) -> datetime:
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def rebuild_spec(base, name: str, max_offsets: int | None):
    """The deployed spec (window, watermarks) on its own topics, tables and checkpoint."""
    side = lambda st, tag: st.model_copy(update={"topic": f"{name}_{tag}"})  # noqa: E731
    streaming = (
        base.streaming
        if max_offsets is None
        else base.streaming.model_copy(update={"max_offsets_per_trigger": max_offsets})
    )
    return base.model_copy(
        update={
            "pipeline": name,
            "left": side(base.left, "left"),
            "right": side(base.right, "right"),
            "streaming": streaming,
        }
    )


def publish_before_cutover(base, spec, bootstrap: str, left_events: int, cutover: datetime, seed: int) -> int:
    """One generated day; the records that arrived in the 8 hours before the cut-over (the replay
    needs the last window span + watermark delay: 5 h 30 min for the default spec)."""
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    wl = generate(WorkloadParams(left_events_per_day=left_events, days=1, seed=seed, start_date=cutover.date()), base)
    cut_ms = int(cutover.timestamp() * 1000)
    r = wl.records
    r = r[(r.arrival_ms < cut_ms) & (r.arrival_ms >= cut_ms - 8 * 3600 * 1000)]
    r = r.assign(topic=r.topic.map({base.left.topic: spec.left.topic, base.right.topic: spec.right.topic}))
    for st in (spec.left, spec.right):
        create_topic(bootstrap, st.topic)
    publish(r, bootstrap)
    return len(r)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replay_rebuild", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--left-events",
        default="20000,200000",
        help="comma-separated left events per day, one run each (default: the generator's default rate and 10x it)",
    )
    p.add_argument("--cutover", default=DEFAULT_CUTOVER, help="ISO-8601 cut-over instant")
    p.add_argument(
        "--max-offsets",
        type=int,
        default=None,
        help="maxOffsetsPerTrigger for the replay (default: the spec's, i.e. no limit)",
    )
    p.add_argument("--spec", default=str(PROJECT_ROOT / "include" / "specs" / "search_sessions.yaml"))
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench" / "replay"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    command = "python -m bench.replay_rebuild " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        rates = [int(x) for x in args.left_events.split(",") if x.strip()]
        cutover = _parse_cutover(args.cutover)
    except ValueError as e:
        p.error(f"--left-events / --cutover: {e}")

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.operate.checkpoint import state_summary
    from jobs.operate.replay import replay, replay_start
    from jobs.spec import load_spec
    from jobs.storage.spark import get_spark

    root = Path(args.root)
    s = scratch_settings(root)
    base = load_spec(args.spec)
    span = timedelta(seconds=base.window.span_seconds)
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    results = []
    spark = None
    try:
        t = time.monotonic()
        spark = get_spark("joinshift-replay-bench", s, throughput=True)  # as `joinshift replay` starts its driver
        spark.range(1).count()
        spark_start = time.monotonic() - t
        for rate in rates:
            spec = rebuild_spec(base, f"rebuild_{rate}", args.max_offsets)
            n = publish_before_cutover(base, spec, bootstrap, rate, cutover, args.seed)
            print(
                f"[{rate:,} left/day] {n:,} records published; replaying to {cutover.isoformat()} ...",
                file=sys.stderr,
                flush=True,
            )
            t = time.monotonic()
            plan = replay(spark, spec, cutover, bootstrap=bootstrap, s=s)
            rebuild_s = time.monotonic() - t
            replayed = _records_after(bootstrap, plan.offsets)
            state = state_summary(spark, str(plan.checkpoint))
            replayed_span = cutover - min(replay_start(spec, side, cutover) for side in ("left", "right"))
            results.append(
                {
                    "left_events_per_day": rate,
                    "records_replayed": replayed,
                    "rebuild_s": round(rebuild_s, 1),
                    "records_per_s": round(replayed / rebuild_s),
                    "window_span_h": span.total_seconds() / 3600,
                    "window_span_over_rebuild": round(span.total_seconds() / rebuild_s, 1),
                    "replayed_span_h": replayed_span.total_seconds() / 3600,
                    "replayed_span_over_rebuild": round(replayed_span.total_seconds() / rebuild_s, 1),
                    "state_rows": {"left": state["left"]["rows"], "right": state["right"]["rows"]},
                    # whether it ended with a micro-batch without data (jobs.operate.replay)
                    "closing_batch": plan.closing_batch,
                }
            )
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    print(
        json.dumps(
            {
                "command": command,
                "cutover": cutover.isoformat(),
                "spark_start_s": round(spark_start, 1),
                "max_offsets_per_trigger": args.max_offsets,
                "runs": results,
            },
            indent=2,
        )
    )
    return 0


def _records_after(bootstrap: str, offsets: dict[str, dict[str, int]]) -> int:
    """Records from the replay's starting offsets to the end of each partition."""
    from jobs.storage.kafka import end_offsets

    ends = end_offsets(bootstrap, sorted(offsets))
    return sum(ends[t][int(p)] - o for t, parts in offsets.items() for p, o in parts.items())


if __name__ == "__main__":
    raise SystemExit(main())
