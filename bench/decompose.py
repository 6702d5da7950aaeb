"""Where the streaming join's throughput goes: the same Kafka topics read by ever more of the
join, stage by stage, in one run (issue #13, item 1).

One generated day is published once into an embedded broker; then, over the same two topics,
events/s (Kafka records of both topics, good and bad, per wall second) of:

====================  =====================================================================
``broker``            the broker's own read ceiling: Kafka's ``ConsumerPerformance`` (a plain
                      JVM consumer, ``.cache/jars/kafka-tools``), each topic in turn
``kafka_source``      Spark's Kafka source (``jobs.storage.kafka.read_stream``) -> ``noop`` sink
``parse``             + ``jobs.join.records.parse_records`` -> ``noop``
``dedup``             + ``good_events``, each side's watermark and ``dropDuplicatesWithinWatermark``
                      on its event id (as ``join_streams`` does before the join) -> ``noop``
``join``              + the interval join's state (``jobs.join.conditions.join_streams``) -> ``noop``
``join_delta``        + the exactly-once Delta sink: the product's own
                      ``jobs.steps.stream.start_streaming_join`` (``quarantine=False``)
``passthrough``       Kafka -> parse -> good events -> Delta, no join, through the join's own sink:
                      ``foreachBatch`` and ``delta_io.BatchAppender`` (the stamped blind
                      append of ``JoinSink``)
``passthrough_delta`` the same into Delta's own streaming sink (``writeStream.format("delta")``),
                      which looks up its transaction id in the table's log on every micro-batch
====================  =====================================================================

Every Spark stage is an ``availableNow`` query with the same ``maxOffsetsPerTrigger`` per topic
(``--max-offsets``), so each reads the backlog in the same equal-sized micro-batches, from a
fresh checkpoint. Every stage runs once over a small warm-up pair of topics first (JIT, class
loading), then over the timed topics again and again until it has run ``--min-seconds`` in all:
its rate is records read ÷ wall seconds over those runs (query start to end; the rate inside
the micro-batches, from Spark's progress, is recorded beside it).

The issue's goals, as ratios of those rates (:func:`goals`): pass-through >= 0.7x Spark's raw
Kafka read, the streaming join >= 0.8x pass-through, the streaming join >= 0.2x the broker's
ceiling. A JSON result and a plot (rates, and a waterfall of microseconds per record added by
each stage) go to ``--out``. ``--state-store memory`` runs every stateful stage on the JVM heap's
store instead of RocksDB (the spec's ``streaming.state_store``).

    python -m bench.decompose [--left-events 300000] [--max-offsets 50000] [--min-seconds 20] [--conf KEY=VALUE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT
from jobs.spec.streaming import StateStore

#: The cumulative stages, cheapest first: each adds one piece of the streaming join.
STAGES = ("broker", "kafka_source", "parse", "dedup", "join", "join_delta")
PASSTHROUGH = "passthrough"
PASSTHROUGH_DELTA = "passthrough_delta"
OTHERS = (PASSTHROUGH, PASSTHROUGH_DELTA)
LABELS = {
    "broker": "broker ceiling (ConsumerPerformance)",
    "kafka_source": "Spark Kafka source -> noop",
    "parse": "+ parse_records",
    "dedup": "+ good_events, de-duplication",
    "join": "+ join state (join_streams) -> noop",
    "join_delta": "+ Delta sink (start_streaming_join)",
    PASSTHROUGH: "pass-through: parse -> Delta (the join's sink)",
    PASSTHROUGH_DELTA: "pass-through into Delta's streaming sink",
}
#: Spark's progress durations recorded per stage (medians over its micro-batches).
STEPS = ("queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


@dataclasses.dataclass(frozen=True)
class Goal:
    """One of the issue's ratios: ``numerator`` ÷ ``denominator`` (events/s) against ``target``."""

    name: str
    numerator: str
    denominator: str
    target: float
    ratio: float | None = None

    @property
    def met(self) -> bool | None:
        return None if self.ratio is None else self.ratio >= self.target


#: Issue #13, item 1.
GOALS = (
    Goal("pass-through vs Spark's raw Kafka read", PASSTHROUGH, "kafka_source", 0.7),
    Goal("streaming join vs pass-through", "join_delta", PASSTHROUGH, 0.8),
    Goal("streaming join vs the broker's ceiling", "join_delta", "broker", 0.2),
)


def goals(rates: Mapping[str, float]) -> list[Goal]:
    """The issue's goals with their ratios from ``rates`` (stage -> events/s); a ratio is None
    when a stage it needs was not measured.

    Example::

        [g.met for g in goals({"kafka_source": 100.0, "passthrough": 60.0, "join_delta": 50.0, "broker": 400.0})]
        # [False, True, False]
    """
    out = []
    for g in GOALS:
        num, den = rates.get(g.numerator), rates.get(g.denominator)
        ratio = round(num / den, 3) if num and den else None
        out.append(dataclasses.replace(g, ratio=ratio))
    return out


def increments(rates: Mapping[str, float]) -> list[tuple[str, float, float]]:
    """The waterfall: per cumulative stage measured, (stage, microseconds per record of the stage,
    microseconds per record it adds to the stage before). Costs per record add up where rates do
    not; an increment can come out negative within the noise."""
    out: list[tuple[str, float, float]] = []
    before = 0.0
    for stage in STAGES:
        if not rates.get(stage):
            continue
        us = 1e6 / rates[stage]
        out.append((stage, round(us, 2), round(us - before, 2)))
        before = us
    return out


# ------------------------------------------------------------------------------ measuring


class CpuBusy:
    """The share of the machine's CPU time that was busy between two readings (every process)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._t = psutil.cpu_times()

    def read(self) -> float:
        t = self._psutil.cpu_times()
        total = sum(t) - sum(self._t)
        idle = (t.idle + getattr(t, "iowait", 0)) - (self._t.idle + getattr(self._t, "iowait", 0))
        self._t = t
        return round(1 - idle / total, 3) if total > 0 else 0.0


def repeat_until(run: Callable[[int], dict[str, Any]], min_seconds: float, timed_key: str) -> list[dict[str, Any]]:
    """Call ``run(i)`` for i = 0, 1, ... until the runs' ``timed_key`` seconds add up to ``min_seconds``."""
    runs: list[dict[str, Any]] = []
    while not runs or sum(r[timed_key] for r in runs) < min_seconds:
        runs.append(run(len(runs)))
    return runs


def consumer_performance(java: str, jars: Path, bootstrap: str, topic: str, messages: int) -> dict[str, Any]:
    """One ``ConsumerPerformance`` run over ``topic`` (all ``messages`` records, a fresh group):
    its own fetch time and the JVM's wall time."""
    cmd = [
        java,
        "-Xmx512m",
        "-cp",
        f"{jars}/*",
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--group",
        f"bench-decompose-{time.time_ns()}",
        "--timeout",
        "30000",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"ConsumerPerformance failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return {"wall_s": round(wall, 3), **parse_consumer_performance(proc.stdout)}


def parse_consumer_performance(stdout: str) -> dict[str, Any]:
    """Records and fetch seconds from ``ConsumerPerformance``'s CSV output (header line, then one
    line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    header = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
    names = [c.strip() for c in lines[header].split(",")]
    values = [c.strip() for c in lines[header + 1].split(",")]
    row = dict(zip(names, values))
    return {
        "records": int(row["data.consumed.in.nMsg"]),
        "mb": float(row["data.consumed.in.MB"]),
        "rebalance_s": float(row["rebalance.time.ms"]) / 1000,
        "fetch_s": float(row["fetch.time.ms"]) / 1000,
    }


def progress_summary(progress) -> dict[str, Any]:
    """Input rows, micro-batches and the time spent inside them, from a query's progress."""
    rows = sum(p.numInputRows for p in progress)
    inside = sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000
    busy = [p for p in progress if p.numInputRows] or list(progress)
    return {
        "input_rows": rows,
        "micro_batches": sum(1 for p in progress if p.numInputRows),
        "in_batches_s": inside,
        "median_ms": {k: statistics.median(p.durationMs.get(k, 0) for p in busy) for k in STEPS} if busy else {},
        # each micro-batch's rows and time, in order: where a run's seconds sit (a slow first one?)
        "batches": [[p.numInputRows, p.durationMs.get("triggerExecution", 0)] for p in progress],
    }


# ------------------------------------------------------------------------------ plot


def plot(result: dict[str, Any], path: Path) -> None:
    """Rates per stage (bars) and the waterfall of microseconds per record each stage adds."""
    from bench.figures import pyplot, save

    plt = pyplot()

    rates = {k: v["events_per_s"] for k, v in result["stages"].items()}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1, 1.15]})

    names = [s for s in (*STAGES, *OTHERS) if s in rates]
    y = list(range(len(names)))[::-1]
    colors = ["#8c8c8c" if n in OTHERS else "#4c72b0" for n in names]
    ax1.barh(y, [rates[n] / 1000 for n in names], color=colors)
    for yi, n in zip(y, names):
        ax1.text(rates[n] / 1000, yi, f" {rates[n] / 1000:,.1f} k", va="center", fontsize=9)
    ax1.set_yticks(y, [LABELS[n] for n in names], fontsize=9)
    ax1.set_xscale("log")
    ax1.set_xlabel("thousand Kafka records per second, both topics (log scale)")
    ax1.set_title("events/s per stage")
    ax1.set_xlim(right=max(rates.values()) / 1000 * 4)

    steps = increments(rates)
    xs = list(range(len(steps)))
    for x, (_stage, total, inc) in zip(xs, steps):
        bottom = total - inc
        ax2.bar(x, inc, bottom=bottom, color="#c44e52" if inc > 0 and x else ("#55a868" if x else "#4c72b0"))
        ax2.text(x, total, f"{'+' if x and inc >= 0 else ''}{inc:,.1f}", ha="center", va="bottom", fontsize=9)
    if PASSTHROUGH in rates:
        pt = 1e6 / rates[PASSTHROUGH]
        ax2.axhline(pt, color="#8c8c8c", ls="--", lw=1)
        ax2.text(-0.45, pt, f"pass-through {pt:,.1f} µs", va="bottom", fontsize=8, color="#555555")
    ax2.set_xticks(xs, [LABELS[s].split(" (")[0].replace(" -> noop", "") for s, _, _ in steps], rotation=20, ha="right")
    ax2.tick_params(axis="x", labelsize=8)
    ax2.set_ylabel("µs per record (cumulative)")
    ax2.set_title("what each stage adds, µs per record")

    r = result
    save(
        fig,
        path,
        f"bench.decompose: {r['records']:,} records ({r['left_events']:,} left events), "
        f"maxOffsetsPerTrigger {r['max_offsets_per_trigger']:,}; {r['date']}, {r['machine']['cpus']} cores",
    )


# ------------------------------------------------------------------------------ the run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.decompose", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=300_000, help="left events in the one generated day")
    p.add_argument("--warmup-left-events", type=int, default=50_000, help="left events of the warm-up topics")
    p.add_argument("--max-offsets", type=int, default=50_000, help="maxOffsetsPerTrigger per topic, every stage")
    p.add_argument("--min-seconds", type=float, default=20.0, help="each stage runs until it has run this long")
    p.add_argument("--stage", action="append", choices=[*STAGES, *OTHERS], help="stages to run (default all)")
    p.add_argument(
        "--state-store",
        choices=[x.value for x in StateStore],
        default=StateStore.rocksdb.value,
        help="the stateful stages' state store (the spec's streaming.state_store)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark SQL conf on the session of every Spark stage, e.g. spark.sql.streaming.join.stateFormatVersion=3",
    )
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-decompose"), help="scratch folder (wiped)")
    p.add_argument("--out", default=str(PROJECT_ROOT / "var" / "bench-results"), help="decompose.json and .png here")
    args = p.parse_args(argv)
    if bad := [c for c in args.conf if "=" not in c.strip("=")]:
        p.error(f"--conf {bad[0]!r}: give KEY=VALUE")
    conf = dict(c.split("=", 1) for c in args.conf)
    command = shlex.join(["python", "-m", "bench.decompose", *(sys.argv[1:] if argv is None else argv)])
    wanted = args.stage or [*STAGES, *OTHERS]

    from jobs.join.columns import col_name, prefixed
    from jobs.join.conditions import join_streams
    from jobs.join.records import good_events, parse_records
    from jobs.local.chaos import publish_workload
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.local.kafka_setup import BrokerJvm
    from jobs.steps.stream import start_streaming_join
    from jobs.storage import delta_io
    from jobs.storage.checkpoints import STATE_STORE_PROVIDER, STATE_STORE_PROVIDERS
    from jobs.storage.kafka import end_offsets, read_stream
    from jobs.storage.spark import get_spark

    root = Path(args.root).resolve()  # the broker's JVM runs in a folder of its own
    s = scratch_settings(root)
    tools = Path(s.jar_cache) / "kafka-tools"
    if "broker" in wanted and not (tools / ".resolved").exists():
        print(
            f"no Kafka tools in {tools}: run `make setup` (build/setup.sh resolves build/kafka-tools)", file=sys.stderr
        )
        return 2
    base = default_spec()
    store = StateStore(args.state_store)

    def bench_spec(name: str):
        """The product's spec on topics of its own, every stage batched alike."""
        return base.model_copy(
            update={
                "pipeline": name,
                "left": base.left.model_copy(update={"topic": f"{name}_left"}),
                "right": base.right.model_copy(update={"topic": f"{name}_right"}),
                "streaming": base.streaming.model_copy(
                    update={"max_offsets_per_trigger": args.max_offsets, "state_store": store}
                ),
            }
        )

    timed_spec, warm_spec = bench_spec("decompose"), bench_spec("warmup")
    load_before = os.getloadavg()
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    stages: dict[str, dict[str, Any]] = {}
    try:
        t0 = time.monotonic()
        n_records = publish_workload(base, timed_spec, bootstrap, args.left_events, seed=20261119)
        publish_s = time.monotonic() - t0
        n_warm = publish_workload(base, warm_spec, bootstrap, args.warmup_left_events, seed=7)
        topic_records = {
            t: sum(parts.values())
            for t, parts in end_offsets(bootstrap, [timed_spec.left.topic, timed_spec.right.topic]).items()
        }
        assert sum(topic_records.values()) == n_records, (topic_records, n_records)
        print(f"published {n_records:,} records in {publish_s:.1f}s ({topic_records}), warm-up {n_warm:,}", flush=True)

        # the stages built here (de-duplication, join) take the session's store; the product's takes the spec's
        spark = get_spark("joinshift-bench-decompose", s, {STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS[store]})
        spark.conf.set("spark.sql.shuffle.partitions", str(base.streaming.shuffle_partitions))
        for key, value in conf.items():
            spark.conf.set(key, value)

        def raw(spec, side: str):
            return read_stream(spark, bootstrap, spec.side(side).topic, spec.streaming.max_offsets_per_trigger)

        def parsed(spec, side: str):
            return parse_records(raw(spec, side), spec.side(side), spec)

        def good(spec, side: str):
            return good_events(parsed(spec, side), spec.side(side))

        def deduplicated(spec, side: str):
            """A side as ``join_streams`` has it before the join: good events, prefixed, watermarked,
            event ids de-duplicated within the watermark."""
            st = spec.side(side)
            return (
                prefixed(good(spec, side), spec, side)
                .withWatermark(col_name(side, st.event_time), f"{st.watermark_seconds} seconds")
                .dropDuplicatesWithinWatermark([col_name(side, st.id)])
            )

        def frame(stage: str, spec):
            """The stage's streaming frame: both sides, unioned (a column one side lacks is null) or joined."""
            if stage == "join":
                return join_streams(good(spec, "left"), good(spec, "right"), spec)
            build = {"kafka_source": raw, "parse": parsed, "dedup": deduplicated}.get(stage, good)
            return build(spec, "left").unionByName(build(spec, "right"), allowMissingColumns=True)

        def join_sink_alike(path: str, writer: str):
            """``JoinSink``'s write without the join's row selection: the stamped blind append (an
            empty batch records no commit)."""
            append = delta_io.BatchAppender(path, lambda: writer)

            def write(batch, batch_id: int) -> None:
                append(batch, batch_id)

            return write

        def spark_run(stage: str, spec, tag: str) -> dict[str, Any]:
            """One availableNow query of ``stage`` from a fresh checkpoint; wall seconds and progress."""
            where = root / "storage" / f"{stage}_{tag}"
            t = time.monotonic()
            if stage == "join_delta":
                rs = dataclasses.replace(s, storage_root=str(where))
                (q,) = start_streaming_join(
                    spark, spec, bootstrap=bootstrap, s=rs, available_now=True, quarantine=False
                )
            else:
                w = (
                    frame(stage, spec)
                    .writeStream.outputMode("append")
                    .option("checkpointLocation", str(where / "checkpoint"))
                    .trigger(availableNow=True)
                )
                if stage == PASSTHROUGH:
                    q = w.foreachBatch(join_sink_alike(str(where / "table"), f"passthrough-{tag}")).start()
                elif stage == PASSTHROUGH_DELTA:
                    q = w.format("delta").partitionBy("ds").start(str(where / "table"))
                else:
                    q = w.format("noop").start()
            q.awaitTermination()
            wall = time.monotonic() - t
            out = {"wall_s": round(wall, 3), **progress_summary(q.recentProgress)}
            shutil.rmtree(where, ignore_errors=True)
            return out

        spark_stages = [st for st in (*STAGES[1:], *OTHERS) if st in wanted]
        for stage in spark_stages:  # warm-up: every stage once over the small topics
            w = spark_run(stage, warm_spec, "warmup")
            print(f"warm-up {stage}: {w['wall_s']:.1f}s ({w['input_rows']:,} rows)", flush=True)

        busy = CpuBusy()
        if "broker" in wanted:
            java = BrokerJvm.java()

            def broker_run(i: int) -> dict[str, Any]:
                per_topic = [
                    consumer_performance(java, tools, bootstrap, topic, n) for topic, n in topic_records.items()
                ]
                return {k: round(sum(r[k] for r in per_topic), 3) for k in ("records", "fetch_s", "wall_s", "mb")}

            runs = repeat_until(broker_run, args.min_seconds, "fetch_s")
            records = sum(r["records"] for r in runs)
            assert records == n_records * len(runs), f"ConsumerPerformance read {records}, not {n_records} per run"
            stages["broker"] = {
                "label": LABELS["broker"],
                "runs": runs,
                "timed_s": round(sum(r["fetch_s"] for r in runs), 2),
                "events_per_s": round(records / sum(r["fetch_s"] for r in runs)),
                "events_per_s_jvm_wall": round(records / sum(r["wall_s"] for r in runs)),
                "cpu_busy": busy.read(),
                "load_avg_after": os.getloadavg(),
            }
            print(f"broker: {stages['broker']['events_per_s']:,} records/s over {len(runs)} run(s)", flush=True)

        for stage in spark_stages:
            busy.read()

            def timed(i: int, stage: str = stage) -> dict[str, Any]:
                return spark_run(stage, timed_spec, str(i))

            runs = repeat_until(timed, args.min_seconds, "wall_s")
            bad = [r["input_rows"] for r in runs if r["input_rows"] != n_records]
            assert not bad, f"{stage} read {bad} rows, not {n_records}"
            wall = sum(r["wall_s"] for r in runs)
            stages[stage] = {
                "label": LABELS[stage],
                "runs": runs,
                "timed_s": round(wall, 2),
                "events_per_s": round(n_records * len(runs) / wall),
                "events_per_s_in_batches": round(n_records * len(runs) / sum(r["in_batches_s"] for r in runs)),
                "micro_batches_per_run": statistics.median(r["micro_batches"] for r in runs),
                "cpu_busy": busy.read(),
                "load_avg_after": os.getloadavg(),
            }
            st = stages[stage]
            print(
                f"{stage}: {st['events_per_s']:,} records/s over {len(runs)} run(s), "
                f"{st['micro_batches_per_run']} micro-batches each, CPU busy {st['cpu_busy']:.0%}",
                flush=True,
            )
        spark.stop()
    finally:
        broker.stop()

    rates = {k: v["events_per_s"] for k, v in stages.items()}
    result = {
        "command": command,
        "state_store": store.value,
        "conf": conf,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
            "python": platform.python_version(),
        },
        "records": n_records,
        "records_per_topic": topic_records,
        "left_events": args.left_events,
        "max_offsets_per_trigger": args.max_offsets,
        "min_seconds": args.min_seconds,
        "publish_s": round(publish_s, 1),
        "stages": stages,
        "increments_us_per_record": [{"stage": s_, "us": t, "added_us": a} for s_, t, a in increments(rates)],
        "goals": [{**dataclasses.asdict(g), "met": g.met} for g in goals(rates)],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decompose.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out / "decompose.png")

    print("| stage | events/s (wall) | inside the micro-batches | µs/record | adds | CPU busy |")
    print("|---|---|---|---|---|---|")
    inc = {s_: (t, a) for s_, t, a in increments(rates)}
    for name in (*STAGES, *OTHERS):
        if name in stages:
            st = stages[name]
            inside = f"{st['events_per_s_in_batches']:,}" if "events_per_s_in_batches" in st else "-"
            us, added = inc.get(name, (round(1e6 / st["events_per_s"], 2), None))
            print(
                f"| {LABELS[name]} | {st['events_per_s']:,} | {inside} | {us:.1f} | "
                f"{'' if added is None else f'{added:+.1f}'} | {st['cpu_busy']:.0%} |"
            )
    if "broker" in stages:
        print(f"broker: {stages['broker']['events_per_s_jvm_wall']:,} records/s counting each JVM's start and exit")
    for g in goals(rates):
        if g.met is None:  # a stage it divides was not run (``--stage``)
            print(f"goal {g.name} (>= {g.target}x): not measured in this run")
        else:
            print(f"goal {g.name}: {g.ratio}x (>= {g.target}x) {'met' if g.met else 'NOT met'}")
    if rates.get(PASSTHROUGH_DELTA) and rates.get("join_delta"):
        ratio = rates["join_delta"] / rates[PASSTHROUGH_DELTA]
        print(f"for information, streaming join vs the pass-through into Delta's streaming sink: {ratio:.3f}x")
    print(f"wrote {out / 'decompose.json'} and {out / 'decompose.png'}")
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
