"""Window sweep cost: K candidate windows in one pass against ONE ``batch_1d_windowed`` join.

In one run, on the same landed-like data (the project's workload generator, written to Delta
partitioned by arrival ds, then read back like the landed tables):

1. **one join**: ``join_events(left ds, right ds, spec, windowed=True)`` followed by an action
   that materialises all of its output (``.count()`` by default, or ``--action noop``: a full
   write to Spark's ``noop`` sink);
2. **sweep**: :func:`jobs.accuracy.sweep.sweep` of the K candidates (default K = 50) over the same
   left/right partitions, ``right_days="same"`` (batch_1d_windowed semantics), collected, by its
   default method (the previous-pair histogram); and, for comparison, by the cell sets (the
   method a predicate naming a left column needs);
3. their ratios, wall and task CPU (issue #13's goal: sweep <= 1.2 × one join in both, at K=169
   and 500 k left events; ``--goal``, judged on the default method).

Each is run ``--warmup`` times untimed, then ``--repeat`` times alternately; the medians are compared, in
wall-clock seconds and in task CPU seconds (summed over the action's Spark stages, from the Spark
UI's REST API: the steadier measure when other processes share the cores).

    python -m bench.window_sweep [--left-events 200000] [--grid "lower=-4h30m..0/30m,upper=0..2h/30m"]
    python -m bench.window_sweep --left-events 500000 --grid "lower=-6h..0/30m,upper=0..6h/30m"   # K=169

``--recommendation-grid`` times the recommendation's grid instead (no Spark): window × left
watermark × right watermark over the generated days, the coarse grid plus its refinements, at
the spec's budgets (:mod:`jobs.accuracy.tradeoff`, :mod:`jobs.accuracy.frontier`).

    python -m bench.window_sweep --recommendation-grid --left-events 20000 [--slice-minutes 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.stages import StageCpu
from jobs.settings import PROJECT_ROOT

#: 10 lowers × 5 uppers = 50 candidates, the spec's [-3h, +30m] among them.
DEFAULT_GRID = "lower=-4h30m..0/30m,upper=0..2h/30m"


def landed_frame(frame, stream):
    """A workload side (event_id, key, event_time, arrival_time + payload) in the landed shape:
    the schema columns, ``_arrival_time``, ``_partition``, ``_offset``, ``ds`` (arrival date, UTC)."""
    import zlib

    out = frame[list(stream.schema_)].copy()
    out["_arrival_time"] = frame["arrival_time"]
    out["_partition"] = frame["key"].map(lambda k: zlib.crc32(k.encode()) % 4).astype("int32")  # 4 "Kafka partitions"
    out["_offset"] = out.groupby("_partition").cumcount().astype("int64")
    out["ds"] = frame["arrival_time"].dt.tz_convert("UTC").dt.date
    for c, t in stream.schema_.items():
        if t == "int":
            out[c] = out[c].astype("int32")
    return out.reset_index(drop=True)


def spark_schema(stream) -> str:
    from jobs.spec import SCHEMA_TYPES

    cols = [f"{c} {SCHEMA_TYPES[t]}" for c, t in stream.schema_.items()]
    return ", ".join([*cols, "_arrival_time timestamp", "_partition int", "_offset bigint", "ds date"])


def recommendation_grid(wl, spec, slice_minutes: int | None) -> None:
    """Time the recommendation's numpy part on a generated workload (pairs joined in pandas)."""
    import numpy as np
    import pandas as pd

    from jobs.accuracy import frontier
    from jobs.accuracy import recommend as r
    from jobs.accuracy.state_model import MemoryModel
    from jobs.accuracy.tradeoff import Observed, evaluate

    cad = r.default_cadence(spec, slice_minutes)

    def us(s):
        return s.astype("datetime64[us, UTC]").astype("int64").to_numpy()

    lt, la = us(wl.left.event_time), us(wl.left.arrival_time) // 1000
    rt, ra = us(wl.right.event_time), us(wl.right.arrival_time) // 1000
    from jobs.accuracy.lateness import batch_clock

    clock = batch_clock(cad, la, lt, ra, rt)
    w, lw, rw = spec.window, spec.left.watermark_seconds, spec.right.watermark_seconds
    axes = {
        "lower_s": sorted({*r.DEFAULT_LOWERS, w.lower_seconds}),
        "upper_s": sorted({*r.DEFAULT_UPPERS, w.upper_seconds}),
        "left_delay_s": sorted({*r.DEFAULT_LEFT_DELAYS, lw}),
        "right_delay_s": sorted({*r.DEFAULT_RIGHT_DELAYS, rw}),
    }
    widest = (axes["lower_s"][0], axes["upper_s"][-1])
    t = time.perf_counter()
    m = pd.DataFrame({"li": np.arange(len(lt)), "key": wl.left.key.to_numpy()}).merge(
        pd.DataFrame({"key": wl.right.key.to_numpy(), "rt": rt, "ra": ra}), on="key"
    )
    d = m.rt.to_numpy() - lt[m.li.to_numpy()]
    keep = (d >= widest[0] * 1_000_000) & (d <= widest[1] * 1_000_000)
    m, d = m[keep], d[keep]
    days = sorted({str(x) for x in pd.to_datetime(la, unit="ms").date})
    obs = Observed(
        cad,
        clock,
        days,
        pd.Categorical(pd.to_datetime(la, unit="ms").date.astype(str), categories=days).codes.astype(np.int64),
        lt,
        clock.batch_of(la, cad),
        m.li.to_numpy(),
        d,
        m.rt.to_numpy(),
        clock.batch_of(m.ra.to_numpy(), cad),
        widest,
    )
    prep = time.perf_counter() - t
    mem = MemoryModel(1.0, 1.5, 400.0)
    lim = frontier.Limits(
        spec.budgets.output_latency.total_seconds() if spec.budgets.output_latency else None,
        float(spec.budgets.state_memory) if spec.budgets.state_memory else None,
    )
    t = time.perf_counter()
    wins = [(a, b) for a in axes["lower_s"] for b in axes["upper_s"] if a <= b]
    grid = evaluate(obs, wins, axes["left_delay_s"], axes["right_delay_s"], mem)
    coarse = len(grid)
    for _ in range(r.REFINE_ROUNDS):
        for ws, combos in frontier.refinement(grid, axes, lim):
            grid = pd.concat([grid, evaluate(obs, ws, [], [], mem, combos=combos)], ignore_index=True)
        grid = grid.drop_duplicates(subset=frontier.KEY, ignore_index=True)
        axes = {k: sorted({int(v) for v in grid[k]}) for k in frontier.KEY}
    took = time.perf_counter() - t
    print(
        f"{len(lt):,} left events, {len(d):,} pairs, {len(clock.end_ms):,} batches ({cad.label()}); "
        f"pairs in pandas {prep:.1f}s; grid {coarse:,} + {len(grid) - coarse:,} refined candidates in {took:.1f}s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.window_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=200_000, help="left events per day (default 200000)")
    p.add_argument("--days", type=int, default=2, choices=(1, 2), help="days of traffic (the first ds is timed)")
    p.add_argument("--grid", default=DEFAULT_GRID, help=f"candidate windows (default {DEFAULT_GRID!r}: K=50)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of each first (default 2)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each, after the warm-up (median; default 5)")
    p.add_argument(
        "--action",
        choices=("count", "noop"),
        default="count",
        help="how the single join is materialised: .count() or a full write to the noop sink",
    )
    p.add_argument("--goal", type=float, default=1.2, help="sweep / one join at most this, wall and CPU (default 1.2)")
    p.add_argument("--spec", default=str(PROJECT_ROOT / "include" / "specs" / "search_sessions.yaml"))
    p.add_argument("--recommendation-grid", action="store_true", help="time the recommendation's grid (no Spark)")
    p.add_argument("--slice-minutes", type=int, help="with --recommendation-grid: replay slices (default: live)")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        p.error("--repeat takes 1 or more timed runs and --warmup 0 or more")
    command = shlex.join(["python", "-m", "bench.window_sweep", *(sys.argv[1:] if argv is None else argv)])

    from pyspark.sql import functions as F

    from jobs.accuracy.grid import format_candidate, parse_grid
    from jobs.accuracy.sweep import sweep
    from jobs.join.conditions import join_events
    from jobs.spec import load_spec
    from jobs.storage.spark import get_spark
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams

    spec = load_spec(args.spec)
    grid = parse_grid(args.grid)
    t = time.perf_counter()
    wl = generate(WorkloadParams(left_events_per_day=args.left_events, days=args.days), spec)
    print(f"generated {len(wl.left)} left / {len(wl.right)} right good events in {time.perf_counter() - t:.1f}s")
    if args.recommendation_grid:
        recommendation_grid(wl, spec, args.slice_minutes)
        print(f"command: {command}")
        return 0
    ds = wl.params.start_date

    scratch = Path(tempfile.mkdtemp(prefix="bench_window_sweep_"))
    os.environ["JOINSHIFT_SPARK_UI"] = "true"  # for the per-stage CPU times (this process only)
    spark = get_spark("joinshift-bench-window-sweep", extra_conf={"spark.ui.port": "0"}, throughput=True)
    cpu = StageCpu(spark)
    try:
        sides = {}
        for side in ("left", "right"):
            stream = spec.side(side)
            pdf = landed_frame(getattr(wl, side), stream)
            path = str(scratch / side)
            (
                spark.createDataFrame(pdf, spark_schema(stream))
                .write.format("delta")
                .partitionBy("ds")
                .mode("overwrite")
                .save(path)
            )
            sides[side] = spark.read.format("delta").load(path).where(F.col("ds") == F.lit(ds))
        left, right = sides["left"], sides["right"]
        n_left, n_right = left.count(), right.count()
        print(
            f"ds={ds}: {n_left} left, {n_right} right landed events; spec window {spec.window.label()}; "
            f"K={len(grid)} candidates, widest {format_candidate(min(a for a, _ in grid), max(b for _, b in grid))}"
        )

        def one_join() -> int:
            out = join_events(left, right, spec, windowed=True)
            if args.action == "count":
                return out.count()
            out.write.format("noop").mode("overwrite").save()
            return -1

        def the_sweep():
            return sweep(left, right, spec, grid, right_days="same")

        def by_cell_sets():
            return sweep(left, right, spec, grid, right_days="same", method="cell-sets")

        for _ in range(args.warmup):  # JIT and code generation settle over the first runs
            one_join(), the_sweep(), by_cell_sets()
        runs: dict[str, list[tuple[float, float]]] = {"join": [], "sweep": [], "cell_sets": []}
        for _ in range(args.repeat):  # the answers checked below are the last timed run's
            wall, cpu_s, rows = cpu.measure(one_join)
            runs["join"].append((wall, cpu_s))
            wall, cpu_s, result = cpu.measure(the_sweep)
            runs["sweep"].append((wall, cpu_s))
            wall, cpu_s, cells = cpu.measure(by_cell_sets)
            runs["cell_sets"].append((wall, cpu_s))
        same = cells.equals(result)
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}

        mine = result[(result.lower_s == spec.window.lower_seconds) & (result.upper_s == spec.window.upper_seconds)]
        if len(mine):
            r = mine.iloc[0]
            print(
                f"sweep at the spec window {spec.window.label()}: match rate {r.match_rate:.4f} "
                f"({r.matched_left}/{r.left_events}), {r.pairs} pairs"
                + (f"; the join's output has {rows} rows" if rows >= 0 else "")
            )
            if rows >= 0 and spec.join.type.value == "left_outer" and spec.join.cardinality.value == "1-to-n":
                ok = rows == r.pairs + (r.left_events - r.matched_left)
                print(f"check: join rows == sweep pairs + unmatched left events: {'yes' if ok else 'NO'}")
        print(f"check: both methods give the same {len(result)} rows: {'yes' if same else 'NO'}")
        for k, label in (
            ("join", f"one batch_1d_windowed join (+{args.action})"),
            ("sweep", f"sweep of K={len(grid)} windows"),
            ("cell_sets", "the same by cell sets"),
        ):
            w, c = med[k]
            print(
                f"{label:40s} wall median {w:6.2f}s {[round(x, 2) for x, _ in runs[k]]}   "
                f"task CPU median {c:6.2f}s {[round(x, 2) for _, x in runs[k]]}"
            )
        (jw, jc), (sw, sc) = med["join"], med["sweep"]
        ratios = {"wall": round(sw / jw, 2), "task_cpu": round(sc / jc, 2)}
        cw, cc = med["cell_sets"]
        print(f"ratio by cell sets / one join: wall {cw / jw:.2f}x, task CPU {cc / jc:.2f}x")
        verdicts = ", ".join(f"{k} {'met' if v <= args.goal else 'NOT met'}" for k, v in ratios.items())
        print(
            f"ratio sweep / one join: wall {ratios['wall']:.2f}x, task CPU {ratios['task_cpu']:.2f}x "
            f"(goal <= {args.goal}x: {verdicts})"
        )
        summary = {
            "left_events": n_left,
            "right_events": n_right,
            "candidates": len(grid),
            "action": args.action,
            "join_wall_s": round(jw, 2),
            "join_cpu_s": round(jc, 2),
            "sweep_wall_s": round(sw, 2),
            "sweep_cpu_s": round(sc, 2),
            "cell_sets_wall_s": round(cw, 2),
            "cell_sets_cpu_s": round(cc, 2),
            "methods_agree": same,
            "ratio": ratios,
            "goal": args.goal,
            "met": {k: v <= args.goal for k, v in ratios.items()},
            "load_avg": os.getloadavg(),
        }
        print(json.dumps(summary))
        print(f"command: {command}")
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
