"""The paced engine against the native one, side by side on the same topics (issue 14 item 5).

One generated day published once into the bench's own broker; then, in one warm JVM:

* **throughput**: both engines over the day's backlog in equal micro-batches (the native
  engine's ``maxOffsetsPerTrigger`` and the paced engine's ``max_records_per_batch``, per stream),
  one warm-up round each, then alternating timed rounds: events/s, paced ÷ native (goal >= 0.5);
* **P6, the right stream 2 h behind** (a consumer outage of the right side, or a backfill): both
  engines start with the right topic read from 2 h before the left one, and read to the end of
  the day in micro-batches of ``--lag-batch-records`` per stream (small enough for the PTs to
  follow the day: a PT needs a few micro-batches of history); the peak of the rows each holds in
  its join state (the native join's buffered rows; the paced operator's buffered left and right
  events, read back from its state store every micro-batch) and the match rate of the left events
  each decided, and of the left events both decided (like for like: a run that is not drained
  leaves its last windows open; goal: peak native ÷ paced >= 5 at an equal rate). Once per ``--lag-window``: the
  spec's own ([-3h, +30m], whose 3 h 30 min of clicks both engines must hold, so it bounds the
  ratio) and a window of minutes, the paper's kind, where the 2 h of left events the native engine
  holds meanwhile is most of its state. With ``--lag-horizon`` the paced runs keep their
  non-matches amendable for that long (late corrections), so a click read after its window closed
  still joins, as the native engine's 2 h right watermark delay lets it: the match rates compared
  are then the final answers. ``--lag 0s`` runs the same without the lag: what the window alone
  costs each engine, the floor the lag's runs are held to;
* **P4**: the paced state's bytes per buffered row, pickled against as stored, over the state
  reads of the first P6 window (goal >= 4x).

Backlog runs (no replay-as-live): a figure here is what a stream catching up would do, not a live
stream (README, "Which rate is which").

    python -m bench.paced [--left-events 50000] [--batch-records 20000] [--repeat 2] [--lag-window=-10m,10m]
        [--lag-horizon 2h] [--lag 2h] [--throughput-only | --skip-throughput]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT

DAY = date(2026, 11, 19)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.paced", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=50_000, help="left events in the one generated day")
    p.add_argument("--batch-records", type=int, default=20_000, help="records per stream and micro-batch")
    p.add_argument("--repeat", type=int, default=2, help="timed throughput rounds after a warm-up (median)")
    p.add_argument("--lag-batch-records", type=int, default=1000, help="records per stream and micro-batch in P6")
    p.add_argument(
        "--lag-window",
        action="append",
        metavar="LOWER,UPPER",
        help="a P6 window, e.g. --lag-window=-10m,10m; 'spec' for the spec's (repeatable; default: spec and -10m,10m)",
    )
    p.add_argument(
        "--lag-horizon",
        metavar="DURATION",
        help="P6's paced runs with late corrections (corrections.horizon, e.g. 2h: the native engine's right "
        "watermark delay), so a click read after its window closed still joins (default: none)",
    )
    p.add_argument(
        "--lag",
        metavar="DURATION",
        default="2h",
        help="how far P6's right stream starts behind the left (default 2h; 0s: the window's own state, no lag)",
    )
    p.add_argument("--skip-throughput", action="store_true", help="leave out the throughput rounds")
    p.add_argument("--shards", type=int, help="the paced operator's shards (default: the spec's)")
    p.add_argument("--blocks", type=int, help="the paced operator's blocks per shard (default: the spec's)")
    p.add_argument("--pt-percentile", type=float, help="the paced engine's PT statistic (default: the spec's, 5)")
    p.add_argument("--throughput-only", action="store_true", help="leave out P6 and P4")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-paced"), help="scratch folder (wiped)")
    p.add_argument("--out", default=str(PROJECT_ROOT / "var" / "bench-results" / "paced.json"), help="result file")
    args = p.parse_args(argv)
    lag_windows = [None if w == "spec" else w.split(",") for w in (args.lag_window or ["spec", "-10m,10m"])]
    try:
        for w in lag_windows:
            _with_window(default_spec(), w)
    except ValueError:  # a pair that is not two durations, lower before upper (pydantic's error is one)
        p.error("--lag-window takes LOWER,UPPER in the spec's duration grammar, e.g. --lag-window=-10m,10m")
    if args.pt_percentile is not None and not 0 <= args.pt_percentile <= 100:
        p.error("--pt-percentile takes a percentile from 0 to 100, e.g. --pt-percentile 50")
    for name in ("shards", "blocks"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name} takes a positive number, e.g. --{name} 4")
    if args.throughput_only and args.skip_throughput:
        p.error("--throughput-only and --skip-throughput leave nothing to run: give one of them")
    from jobs.spec import Corrections, format_duration
    from jobs.spec.duration import parse_duration

    try:
        lag_by = parse_duration(args.lag)
    except ValueError:
        p.error("--lag takes a duration in the spec's grammar, e.g. --lag 2h or --lag 0s")
    if lag_by < timedelta(0):
        p.error("--lag takes a duration of 0s or more: how far the right stream starts behind the left")
    try:
        corrections = Corrections.model_validate({"horizon": args.lag_horizon})
    except ValueError:
        p.error("--lag-horizon takes a positive duration in the spec's grammar, e.g. --lag-horizon 2h")

    from pyspark.sql import functions as F

    from jobs.accuracy.state_model import peak_rows
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.operate.checkpoint import paced_state_summary
    from jobs.spec import Engine
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.kafka import create_topic, offsets_for_time
    from jobs.storage.progress import JOIN_QUERY, JOIN_STATE, read_progress, settle_log
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    root = Path(args.root)
    s = scratch_settings(root)
    native = default_spec(args.batch_records)
    paced = native.model_copy(
        update={
            "streaming": native.streaming.model_copy(
                update={
                    "engine": Engine.paced,
                    "paced": native.streaming.paced.model_copy(
                        update={"max_records_per_batch": args.batch_records}
                        | ({"shards": args.shards} if args.shards is not None else {})
                        | ({"blocks": args.blocks} if args.blocks is not None else {})
                        | ({"pt_percentile": args.pt_percentile} if args.pt_percentile is not None else {})
                    ),
                }
            )
        }
    )
    engines = {"native": native, "paced": paced}

    def sized(spec, n: int):
        """The spec with micro-batches of ``n`` records per stream, whichever engine reads."""
        streaming = spec.streaming.model_copy(
            update={
                "max_offsets_per_trigger": n,
                "paced": spec.streaming.paced.model_copy(update={"max_records_per_batch": n}),
            }
        )
        return spec.model_copy(update={"streaming": streaming})

    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    result: dict = {"command": "python -m bench.paced " + " ".join(argv or sys.argv[1:])}
    try:
        wl = generate(WorkloadParams(left_events_per_day=args.left_events, days=1, start_date=DAY), native)
        for stream in (native.left, native.right):
            create_topic(bootstrap, stream.topic)
        publish(wl.records, bootstrap)
        records = len(wl.records)
        left_events = int((wl.records.topic == native.left.topic).sum())
        print(f"published {records:,} records ({left_events:,} on the left)", file=sys.stderr)
        spark = get_spark("joinshift-bench-paced", s)

        def run(engine: str, tag: str, starting=None, spec=None):
            spec = spec or sized(engines[engine], args.batch_records)
            rs = dataclasses.replace(s, storage_root=str(root / "storage" / f"{engine}_{tag}"))
            t0 = time.monotonic()
            (q,) = start_streaming_join(
                spark,
                spec,
                bootstrap=bootstrap,
                s=rs,
                available_now=True,
                quarantine=False,
                starting_offsets=starting,
            )
            q.awaitTermination()
            wall = time.monotonic() - t0
            settle_log(Tables.of(spec, rs).progress_log(JOIN_QUERY), q)
            return wall, q, rs

        # -- throughput -------------------------------------------------------------------
        rounds: dict[str, list[float]] = {"native": [], "paced": []}
        for r in range(0 if args.skip_throughput else args.repeat + 1):
            for engine in ("native", "paced"):
                wall, q, _ = run(engine, f"throughput{r}")
                print(f"round {r}{' (warm-up)' if r == 0 else ''}: {engine} {wall:.1f} s", file=sys.stderr)
                if r:
                    rounds[engine].append(wall)
        if not args.skip_throughput:
            rate = {e: records / statistics.median(w) for e, w in rounds.items()}
            result["throughput"] = {
                "records": records,
                "events_per_s": {e: round(v) for e, v in rate.items()},
                "paced_vs_native": round(rate["paced"] / rate["native"], 3),
                "goal": ">= 0.5",
            }

        if args.throughput_only:
            return _write(result, args.out)
        # -- P6 and P4: the right stream --lag (2 h) behind ---------------------------------
        start = datetime.combine(DAY, datetime.min.time(), UTC) + timedelta(hours=8)
        starting = {
            native.left.topic: offsets_for_time(bootstrap, native.left.topic, start),
            native.right.topic: offsets_for_time(bootstrap, native.right.topic, start - lag_by),
        }
        from_ms = int(start.timestamp() * 1000)
        spark.conf.set("spark.sql.streaming.minBatchesToRetain", "100000")  # every batch's state, to read back
        p6: list[dict] = []
        state_reads: list[dict] = []
        for window in lag_windows:
            windowed = {e: _with_window(spec, window) for e, spec in engines.items()}
            windowed["paced"] = windowed["paced"].model_copy(update={"corrections": corrections})
            lag: dict[str, Any] = {"window": windowed["native"].window.label(), "paced_horizon": args.lag_horizon}
            ids: dict[str, dict[str, bool]] = {}  # per engine: left event id -> matched, of those it decided
            for engine in ("native", "paced"):
                spec = sized(windowed[engine], args.lag_batch_records)
                wall, q, rs = run(engine, f"lag{len(p6)}", starting, spec=spec)
                progress = read_progress(Tables.of(spec, rs).progress_log(JOIN_QUERY))
                out = spark.read.format("delta").load(Tables.of(spec, rs).output("stream"))
                lefts = out.where(F.unix_millis(F.col("left_arrival_time")) >= from_ms)
                ids[engine] = {
                    r[0]: bool(r[1])
                    for r in lefts.groupBy("left_event_id").agg(F.max(F.col("right_event_id").isNotNull())).collect()
                }
                decided, matched = len(ids[engine]), sum(ids[engine].values())
                if engine == "native":
                    peak = peak_rows(progress, JOIN_STATE)
                else:  # its state as of every micro-batch, read back from the state store
                    checkpoint = Tables.of(spec, rs).checkpoint(JOIN_QUERY)
                    reads = [paced_state_summary(spark, checkpoint, p["batchId"]) for p in progress]
                    state_reads = state_reads or reads
                    peak = max((r["events"] for r in reads), default=0)
                lag[engine] = {
                    "wall_s": round(wall, 1),
                    "micro_batches": len(progress),
                    "peak_state_rows": int(peak),
                    "left_events_decided": decided,
                    "match_rate_of_decided": round(matched / decided, 4) if decided else None,
                }
                print(f"lag run {lag['window']} {engine}: {lag[engine]}", file=sys.stderr)
            # like for like: the rates over the left events both engines decided (a run not drained leaves
            # its last windows open, and the day's last hours match at another rate than the rest)
            both = ids["native"].keys() & ids["paced"].keys()
            rate = {e: sum(ids[e][i] for i in both) / len(both) if both else float("nan") for e in ids}
            lag["both_decided"] = {
                "left_events": len(both),
                **{f"{e}_match_rate": round(r, 5) for e, r in rate.items()},
                "paced_minus_native_pp": round(100 * (rate["paced"] - rate["native"]), 3),
            }
            print(f"lag run {lag['window']} both decided: {lag['both_decided']}", file=sys.stderr)
            lag["peak_native_vs_paced"] = round(
                lag["native"]["peak_state_rows"] / max(1, lag["paced"]["peak_state_rows"]), 2
            )
            p6.append(lag)
        result[f"p6_right_{format_duration(lag_by)}_behind"] = {"goal": ">= 5 at an equal match rate", "by_window": p6}
        raw = sum(r["raw_bytes"] for r in state_reads)
        stored = sum(r["stored_bytes"] for r in state_reads)
        rows = sum(r["events"] for r in state_reads)
        result["p4_state_bytes_per_row"] = {
            "state_reads": len(state_reads),
            "raw_per_row": round(raw / rows, 1) if rows else None,
            "stored_per_row": round(stored / rows, 1) if rows else None,
            "raw_vs_stored": round(raw / stored, 2) if stored else None,
            "goal": ">= 4",
        }
        spark.stop()
    finally:
        broker.stop()
    return _write(result, args.out)


def _with_window(spec, window: list[str] | None):
    """The spec with another join window (``[lower, upper]`` in the duration grammar), or as it is."""
    if window is None:
        return spec
    lower, upper = window  # ValueError unless two
    return spec.model_copy(update={"window": type(spec.window).model_validate({"lower": lower, "upper": upper})})


def _write(result: dict, out: str) -> int:
    text = json.dumps(result, indent=2)
    print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
