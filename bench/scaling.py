"""How the streaming join scales, in one run on the embedded broker (issue 13, item 5):

1. events/s vs the state's shuffle partitions (``--partitions``, default 1,2,4) at one size;
2. events/s vs the day's size (``--sizes`` left events a day, default 100k,1M,5M) at the spec's
   partitions;
3. the join's state vs the window's span (``--spans``): peak state rows and bytes over the run's
   micro-batches (Spark's ``stateOperators``: rows and memory used of the de-duplication and join
   stores, summed over operators).

Every point of these three is the product's join (``start_streaming_join``, ``availableNow``, the
exactly-once Delta sink, no quarantine query) from a fresh checkpoint over a backlog in Kafka read
in micro-batches of ``--batch-records`` per topic; events/s = Kafka records read ÷ wall time. A
backlog rate is an upper bound on what a live stream sustains at the same size (it never waits
for a trigger), and a backlog's state is bounded by its batches as much as by the window. One
warm-up run first.

4. ``live``: the join's state vs the window's span as a live stream holds it: two days of
   ``--live-size`` left events a day, landed, then replayed as live (``--slice-minutes``
   slices, the product's ``replay_as_live``) once per span in ``--live-spans``; beside each, the
   state the recommendation's memory model predicts for that window at the trial's cadence and
   at the spec's live trigger (``jobs.accuracy.state_model``, from the landed days).

A table per part, a JSON result and a plot.

    python -m bench.scaling [--parts partitions,spans,sizes,live] [--sizes 100000,1000000,5000000]
                            [--partitions 1,2,4] [--spans ...] [--live-spans ...] [--slice-minutes 60]
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
PARTS = ("partitions", "spans", "sizes", "live")


def state_peak(progress: list[dict[str, Any]]) -> dict[str, int]:
    """The largest per-batch sums, over a run's progress records, of the state's rows, its memory
    (RocksDB's ``memoryUsedBytes``) and its files (``rocksdbSstFileSize``), all operators; and of
    the join's own rows and memory and the de-duplication's ids (the state model's two parts)."""
    from jobs.accuracy.state_model import operator_state, peak_rows
    from jobs.storage.progress import DEDUP_STATE, JOIN_STATE

    def peak(value) -> int:
        return max((sum(value(op) for op in p.get("stateOperators", [])) for p in progress), default=0)

    return {
        "state_rows": peak(lambda op: op.get("numRowsTotal", 0)),
        "state_bytes": peak(lambda op: op.get("memoryUsedBytes", 0)),
        "state_sst_bytes": peak(lambda op: op.get("customMetrics", {}).get("rocksdbSstFileSize", 0)),
        "join_rows": peak_rows(progress, JOIN_STATE),
        "join_bytes": max((mem for _, mem in operator_state(progress, JOIN_STATE)), default=0),
        "dedup_rows": peak_rows(progress, DEDUP_STATE),
    }


def parse_span(text: str) -> tuple[timedelta, timedelta]:
    """``-3h..+30m`` -> (lower, upper)."""
    from jobs.spec.duration import parse_duration

    lower, upper = text.split("..")
    return parse_duration(lower), parse_duration(upper)


def _slice_progress(label: str):
    """Print a line every tenth of a replay's slices: a span takes minutes."""

    def on_slice(done: int, total: int, _end_ms: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            print(f"  window {label}: slice {done}/{total}", flush=True)

    return on_slice


def live_spans(spark, base, s, bootstrap: str, spans, left_events: int, slice_minutes: float) -> list[dict[str, Any]]:
    """Part 4: two days of ``left_events`` a day landed, then replayed as live once per span; each
    point is the measured peak state beside the memory model's prediction for that window."""
    from jobs.accuracy.recommend import default_cadence
    from jobs.accuracy.state_model import memory_model
    from jobs.accuracy.tradeoff import observe
    from jobs.steps.landing import land_day
    from jobs.steps.replay_live import replay_as_live
    from jobs.storage.kafka import create_topic
    from jobs.storage.progress import DEDUP_STATE, JOIN_QUERY, JOIN_STATE, read_progress
    from jobs.storage.tables import Tables
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    spec = base.model_copy(
        update={
            "pipeline": "scaling_live",
            **{
                side: base.side(side).model_copy(update={"topic": f"{base.side(side).topic}_live"})
                for side in ("left", "right")
            },
        }
    )
    days = [DAY, DAY + timedelta(days=1)]
    t0 = time.monotonic()
    wl = generate(WorkloadParams(left_events_per_day=left_events, days=len(days), start_date=DAY), base)
    records = wl.records.assign(
        topic=wl.records.topic.map({base.left.topic: spec.left.topic, base.right.topic: spec.right.topic})
    )
    for st in (spec.left, spec.right):
        create_topic(bootstrap, st.topic)
    publish(records, bootstrap)
    for d in [*days, days[-1] + timedelta(days=1)]:  # the day after: the last day's late clicks
        land_day(spark, spec, d, s, bootstrap)
    print(f"live: {len(records):,} records over {len(days)} days published and landed in {time.monotonic() - t0:.0f} s")
    # the landed days' arrivals, read once: the model's rates do not depend on the window
    widest = (int(min(lo.total_seconds() for _, lo, _ in spans)), int(max(up.total_seconds() for _, _, up in spans)))
    _, rec = observe(spark, spec, days, default_cadence(spec, slice_minutes), widest, s)
    points = []
    for text, lower, upper in spans:
        trial = spec.with_window(lower, upper)
        t0 = time.monotonic()
        run = replay_as_live(
            spark,
            trial,
            bootstrap=bootstrap,
            days=days,
            slice_minutes=slice_minutes,
            s=s,
            on_slice=_slice_progress(text),
        )
        wall = time.monotonic() - t0
        progress = read_progress(Tables.of(trial, s).progress_log(JOIN_QUERY))
        window = (trial.window.lower_seconds, trial.window.upper_seconds)
        model = memory_model(progress, rec)
        delays = (trial.left.watermark_seconds, trial.right.watermark_seconds)
        cadence = {"trial": default_cadence(trial, slice_minutes), "live": default_cadence(trial)}
        predicted = {at: model.state_rows(*window, *delays, c) for at, c in cadence.items()}
        point = {
            "label": f"window {text}",
            "records": run.records,
            "micro_batches": run.batches,
            "wall_s": round(wall, 1),
            **state_peak(progress),
            "bytes_per_row": round(model.bytes_per_row),
            "id_bytes_per_row": round(model.id_bytes_per_row),
            "predicted_bytes": round(model.bytes(*window, *delays, cadence["trial"])),
            **{
                f"predicted{'' if at == 'trial' else '_live'}_{name}_rows": round(rows[kind])
                for at, rows in predicted.items()
                for name, kind in (("join", JOIN_STATE), ("dedup", DEDUP_STATE))
            },
        }
        print(json.dumps(point), flush=True)
        points.append(point)
    return points


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,1000000,5000000", help="left events a day, one point each")
    p.add_argument("--partitions", default="1,2,4", help="shuffle (state) partitions, one point each")
    p.add_argument("--partitions-size", type=int, default=200_000, help="left events a day for parts 1 and 3")
    p.add_argument("--spans", default="-30m..+30m,-3h..+30m,-6h..+1h", help="windows for part 3")
    p.add_argument("--batch-records", type=int, default=50_000, help="maxOffsetsPerTrigger per topic")
    p.add_argument("--parts", default=",".join(PARTS), help=f"which parts to run, of {','.join(PARTS)}")
    p.add_argument("--live-size", type=int, default=100_000, help="left events a day for the live part")
    p.add_argument("--live-spans", default="-30m..+30m,-3h..+30m,-6h..+1h", help="windows for the live part")
    p.add_argument("--slice-minutes", type=float, default=60, help="the live part's replay-as-live slices")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-scaling"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",")]
        partitions = [int(x) for x in args.partitions.split(",")]
        spans = [(x, *parse_span(x)) for x in args.spans.split(",")]
        live = [(x, *parse_span(x)) for x in args.live_spans.split(",")]
    except ValueError as exc:
        p.error(f"--sizes, --partitions, --spans and --live-spans are comma-separated lists ({exc})")
    parts = [x for x in args.parts.split(",") if x]
    if not parts or set(parts) - set(PARTS):
        p.error(f"--parts takes a comma-separated list of {', '.join(PARTS)}")
    if args.slice_minutes <= 0:
        p.error("--slice-minutes must be positive (minutes of record time a slice)")

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
        if {"partitions", "spans", "sizes"} & set(parts):
            spec_p, _ = topics_of(args.partitions_size)
            run(spec_p, "warm-up")
        if "partitions" in parts:
            result["partitions"] = [
                run(
                    spec_p.model_copy(
                        update={"streaming": spec_p.streaming.model_copy(update={"shuffle_partitions": n})}
                    ),
                    f"{n} partitions",
                )
                for n in partitions
            ]
        if "spans" in parts:
            result["spans"] = [run(spec_p.with_window(lower, upper), f"window {text}") for text, lower, upper in spans]
        if "sizes" in parts:
            result["sizes"] = [run(topics_of(n)[0], f"{n:,} left a day") for n in sizes]
        if "live" in parts:
            result["live"] = live_spans(spark, base, s, bootstrap, live, args.live_size, args.slice_minutes)
            result["live_mode"] = f"replay-as-live, {args.slice_minutes:g}-minute slices, {args.live_size:,} left a day"
        spark.stop()
    finally:
        broker.stop()

    for part in [x for x in ("partitions", "spans", "sizes") if x in result]:
        print(f"\n| {part} | records | micro-batches | wall | events/s | peak state rows | memory MB | files MB |")
        print("|---|---|---|---|---|---|---|---|")
        for x in result[part]:
            print(
                f"| {x['label']} | {x['records']:,} | {x['micro_batches']} | {x['wall_s']} s | {x['events_per_s']:,} "
                f"| {x['state_rows']:,} | {x['state_bytes'] / 2**20:.1f} | {x['state_sst_bytes'] / 2**20:.1f} |"
            )
    if "live" in result:
        print(
            f"\n| live: {result['live_mode']} | records | micro-batches | wall | peak join rows: measured "
            "| predicted | ÷ | peak ids (de-duplication): measured | predicted | ÷ "
            "| predicted at the live trigger: join / ids | join memory MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for x in result["live"]:
            print(
                f"| {x['label']} | {x['records']:,} | {x['micro_batches']} | {x['wall_s']} s "
                + "".join(
                    f"| {x[f'{k}_rows']:,} | {x[f'predicted_{k}_rows']:,} "
                    f"| {x[f'{k}_rows'] / max(x[f'predicted_{k}_rows'], 1):.2f} "
                    for k in ("join", "dedup")
                )
                + f"| {x['predicted_live_join_rows']:,} / {x['predicted_live_dedup_rows']:,} "
                f"| {x['join_bytes'] / 2**20:.1f} |"
            )
    out = root / "result.json"
    out.write_text(json.dumps(result, indent=2))
    plot(result, root / "scaling.png")
    print(f"\nwritten {out} and {root / 'scaling.png'}")
    return 0


def _rate_panel(ax, points: list[dict[str, Any]], title: str) -> None:
    xs = [x["label"].split(" ")[0] for x in points]
    ys = [x["events_per_s"] for x in points]
    ax.bar(xs, ys, color="#4c72b0")
    for i, y in enumerate(ys):
        ax.annotate(f"{y / 1000:.1f} k", (i, y), ha="center", va="bottom")
    ax.set_title(title)
    ax.set_ylabel("Kafka records per second")


def _backlog_state_panel(ax, spans: list[dict[str, Any]]) -> None:
    at = range(len(spans))
    mem = [x["state_bytes"] / 2**20 for x in spans]
    ax.bar([i - 0.2 for i in at], mem, width=0.4, color="#c44e52", label="memory (RocksDB)")
    ax.bar([i + 0.2 for i in at], [x["state_sst_bytes"] / 2**20 for x in spans], width=0.4, label="files (SST)")
    for i, x in enumerate(spans):
        ax.annotate(f"{x['state_rows']:,} rows", (i, max(mem)), ha="center", va="bottom")
    ax.set_xticks(list(at), [x["label"].removeprefix("window ") for x in spans])
    ax.legend()
    ax.set_title("peak state (all operators) vs window span, backlog")
    ax.set_ylabel("MB")


def _live_state_panel(ax, live: list[dict[str, Any]], mode: str) -> None:
    """Per span, measured and predicted peak rows: the join's window below, the de-duplication's ids on top."""
    at = range(len(live))
    bars = (
        ("", "measured", "#c44e52", -0.27),
        ("predicted_", "predicted, trial cadence", "#8c8c8c", 0.0),
        ("predicted_live_", "predicted, live trigger", "#4c72b0", 0.27),
    )
    for prefix, label, color, dx in bars:
        join = [x[f"{prefix}join_rows"] for x in live]
        xs = [i + dx for i in at]
        ax.bar(xs, join, width=0.27, color=color, label=label)
        ax.bar(xs, [x[f"{prefix}dedup_rows"] for x in live], width=0.27, bottom=join, color=color, alpha=0.45)
    ax.set_xticks(list(at), [x["label"].removeprefix("window ") for x in live])
    ax.legend(title="join rows; ids (light) on top", fontsize=8, title_fontsize=8)
    ax.set_title(f"peak state rows vs window span\n{mode}", fontsize=10)
    ax.set_ylabel("rows")


def plot(result: dict[str, Any], path: Path) -> None:
    from bench.figures import pyplot, save

    plt = pyplot()

    panels = [
        *(
            [lambda ax: _rate_panel(ax, result["partitions"], "events/s vs state partitions")]
            if "partitions" in result
            else []
        ),
        *([lambda ax: _rate_panel(ax, result["sizes"], "events/s vs left events a day")] if "sizes" in result else []),
        *([lambda ax: _backlog_state_panel(ax, result["spans"])] if "spans" in result else []),
        *([lambda ax: _live_state_panel(ax, result["live"], result["live_mode"])] if "live" in result else []),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.5, 5 * len(panels)), 4.6), squeeze=False)
    for ax, draw in zip(axes[0], panels):
        draw(ax)
    save(fig, path, result["command"], fontsize=9, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
