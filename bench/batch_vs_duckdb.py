"""The batch windowed join on Spark (the product's own code path) against DuckDB, same tables,
same join, same answer (issue #13, item 3).

Per size (``--left-events``, e.g. 1 M and 10 M left events in one ds), a generated workload is
written once as each side's daily Parquet table (Hive-style ``ds=`` folders: the schema's
columns and the arrival time), and then, alternately:

* **Spark**: ``jobs.steps.batch.run_variant(spark, spec, "batch_1d_windowed", ds)``, the step
  ``joinshift batch`` runs, on a spec whose sides read those tables (``batch_table``, Parquet):
  it reads the ds partitions, joins with ``jobs.join.conditions.join_events`` (key equality and
  ``r.t BETWEEN l.t + lower AND l.t + upper``, the spec's ``left_outer``), replaces the ds
  partition of the output Delta table, counting its rows as it writes them;
* **DuckDB**: the same join in SQL over the same Parquet files (``read_parquet``, hive
  partitioning, the ds filtered), the output columns of the product (``output_columns``) written
  to a Parquet file with ``COPY``, and its rows counted.

Spark's wall time is split into the product's checks of which days each side holds
(``landed_sides``), the join with its Delta write (``replace_partitions``) and the rest (the
inputs' schemas, the run's own bookkeeping); after the timed runs the join alone runs once more into
Spark's ``noop`` sink. **Where the seconds go**, in the same parts for both engines
(:mod:`bench.stages`): Spark's task CPU per stage, as reading and shuffling each side, the join
(with the write, in the same stage) and the rest, for each timed run and for the join into
``noop`` (so the write is the difference); DuckDB's time per operator from its JSON profile
(reading, the join, the write), in one more, profiled run after the timed ones. Both outputs
are checked for the same answer: rows, pairs (rows with a right event) and matched left events.
Wall seconds per run, medians over ``--repeat`` runs (fewer for a size whose runs took
``--max-seconds``), and the ratio Spark ÷ DuckDB (goal: <= 3x at 10 M). One warm-up of both on
the first size comes first (Spark's JIT).

Sizes above ``--chunk`` left events are generated as chunks of that size (each its own seed; ids
and keys prefixed with the chunk, so chunks share no session): the generator holds every Kafka
record of a day in memory (JSON values included), ~24 M of them for 10 M left events.

    python -m bench.batch_vs_duckdb [--left-events 1000000,10000000] [--repeat 2]

Writes ``batch_vs_duckdb.json`` and its plot, ``batch_vs_duckdb.png`` (wall seconds and the ratio;
CPU seconds by part), into ``--out``; ``--plot-from <json>`` draws the plot of a recorded result
and prints its tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from bench.scratch import default_spec, scratch_settings
from bench.stages import StageCpu, duckdb_parts, spark_parts
from jobs.settings import PROJECT_ROOT

VARIANT = "batch_1d_windowed"
#: Issue #13: Spark's batch windowed join within 3x DuckDB's wall time at 10 M left events.
GOAL_RATIO = 3.0


def windowed_join_sql(spec, left: str, right: str, ds: date, out: str) -> str:
    """DuckDB's ``COPY`` of ``batch_1d_windowed`` for ``ds``: left ds ⋈ right ds on the keys and
    ``r.t BETWEEN l.t + lower AND l.t + upper`` (bounds inclusive), the spec's join type, into the
    product's output columns (Kafka positions null: the tables are not from Kafka)."""
    from jobs.join.columns import OFFSET, PARTITION, col_name, output_columns, side_columns
    from jobs.spec import Cardinality, JoinType

    if spec.join.predicate is not None or spec.join.cardinality != Cardinality.one_to_n:
        raise ValueError("the DuckDB side covers key + window joins with 1-to-n output (no predicate)")
    how = "LEFT JOIN" if spec.join.type == JoinType.left_outer else "JOIN"
    keys = " AND ".join(f'l."{lk}" = r."{rk}"' for lk, rk in zip(spec.left.key, spec.right.key))
    lt, rt = f'l."{spec.left.event_time}"', f'r."{spec.right.event_time}"'
    window = (
        f"{rt} BETWEEN {lt} + INTERVAL ({spec.window.lower_seconds}) SECOND "
        f"AND {lt} + INTERVAL ({spec.window.upper_seconds}) SECOND"
    )

    # the product's output columns (output_columns), each from its side's column
    source = {"ds": "l.ds"}
    for which, alias in (("left", "l"), ("right", "r")):
        for c in side_columns(spec, which):
            typed = {PARTITION: "NULL::INTEGER", OFFSET: "NULL::BIGINT"}
            source[col_name(which, c)] = typed.get(c, f'{alias}."{c}"')

    def side(path: str) -> str:
        return (
            f"(SELECT * FROM read_parquet('{path}/*/*.parquet', hive_partitioning = true) "
            f"WHERE ds = DATE '{ds.isoformat()}')"
        )

    select = ", ".join(f'{source[c]} AS "{c}"' for c in output_columns(spec))
    return (
        f"COPY (SELECT {select} FROM {side(left)} l {how} {side(right)} r ON {keys} AND {window}) "
        f"TO '{out}' (FORMAT parquet)"
    )


def write_tables(spec, left_events: int, chunk: int, root: Path, seed: int) -> dict[str, Any]:
    """Generate ``left_events`` left events of one day (in chunks) and write each side as a Parquet
    table partitioned by arrival ds under ``root/<side>``; returns counts for the first ds."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams

    shutil.rmtree(root, ignore_errors=True)
    day = date(2026, 11, 19)
    n_chunks = -(-left_events // chunk)
    counts = {"left": 0, "right": 0}
    for i in range(n_chunks):
        n = min(chunk, left_events - i * chunk)
        wl = generate(WorkloadParams(left_events_per_day=n, days=1, start_date=day, seed=seed + i), spec)
        for side in ("left", "right"):
            st = spec.side(side)
            frame = getattr(wl, side)
            cols = {c: frame[c] for c in st.schema_}
            if n_chunks > 1:  # chunks share no id and no session
                for c in {st.id, *st.key}:
                    cols[c] = f"c{i}-" + frame[c].astype(str)
            table = pa.table(
                {
                    **{
                        c: pa.array(v.to_numpy(), type=pa.int32()) if st.schema_[c] == "int" else v
                        for c, v in cols.items()
                    },
                    "_arrival_time": frame["arrival_time"],
                }
            )
            ds = frame["arrival_time"].dt.tz_convert(spec.timezone).dt.date.to_numpy()
            for d in sorted(set(ds)):
                part = root / side / f"ds={d.isoformat()}"
                part.mkdir(parents=True, exist_ok=True)
                pq.write_table(
                    table.filter(pa.array(ds == d)),
                    part / f"part-{i:03d}.parquet",
                    coerce_timestamps="us",
                    allow_truncated_timestamps=True,
                )
                if d == day:
                    counts[side] += int(np.sum(ds == d))
        del wl
    return {"ds": day, **counts}


def output_counts(rows, pairs, matched_left) -> dict[str, int]:
    return {"rows": int(rows), "pairs": int(pairs), "matched_left": int(matched_left)}


#: The parts both engines' CPU seconds are split into, in the table and the plot.
PARTS = ("read", "join", "write", "other")


def cpu_parts(size: dict[str, Any]) -> tuple[dict[str, float] | None, dict[str, float]]:
    """A size's CPU seconds by part, (Spark's, DuckDB's): Spark's task CPU of its last timed run, with the
    join's own from the join into ``noop`` and the write as the rest of the join's stage (the stage
    that joins also writes); None for Spark where its join was broadcast (one stage reads, joins and
    writes); DuckDB's operator time from its profiled run."""
    sp, noop, dk = size["spark_task_cpu_s"][-1], size["spark_join_to_noop_task_cpu_s"], size["duckdb_cpu_s"]
    spark = None
    if sp is not None and noop is not None:
        write = round(sp["join"] - noop["join"], 2)
        spark = {"read": sp["read"], "join": noop["join"], "write": write, "other": sp["other"]}
    return spark, {k: dk[k] for k in PARTS}


def plot(result: dict[str, Any], path: Path) -> None:
    """Wall seconds per engine and size, with the ratio against the goal (left); CPU seconds by part
    at each size (right): where Spark's extra seconds go."""
    from bench.figures import pyplot, save

    plt = pyplot()

    sizes = result["sizes"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.3]})
    colors = {"Spark": "#4c72b0", "DuckDB": "#dd8452"}
    width, target = 0.38, result["goal"]["target"]
    top = max(max(r["spark_median_s"], target * r["duckdb_median_s"]) for r in sizes) * 1.25
    for i, r in enumerate(sizes):
        for j, (engine, key) in enumerate((("Spark", "spark_median_s"), ("DuckDB", "duckdb_median_s"))):
            ax1.bar(i + (j - 0.5) * width, r[key], width, color=colors[engine], label=engine if i == 0 else None)
            ax1.text(i + (j - 0.5) * width, r[key], f"{r[key]:.1f} s", ha="center", va="top", fontsize=8, color="white")
        goal = target * r["duckdb_median_s"]  # the most Spark may take at the goal's ratio
        ax1.hlines(
            goal, i - width, i, colors="#555555", linestyles="dashed", label=f"{target}× DuckDB" if i == 0 else None
        )
        ax1.text(i, max(r["spark_median_s"], goal) + top * 0.06, f"{r['ratio']}×", ha="center", fontsize=10)
    ax1.set_xticks(range(len(sizes)), [f"{r['left_rows']:,} left" for r in sizes], fontsize=9)
    ax1.set_ylabel("wall seconds (median)")
    ax1.set_ylim(top=top)
    ax1.set_title(f"Spark ÷ DuckDB (goal ≤ {target}× at {result['goal']['spark_over_duckdb_at']:,})")
    ax1.legend(fontsize=8, loc="upper left")

    shades = {"read": 1.0, "join": 0.75, "write": 0.5, "other": 0.25}
    by_size = [cpu_parts(r) for r in sizes]
    widest = max(sum((p or {}).values()) for engines in by_size for p in engines)
    labels: list[str] = []
    y = 0.0
    for r, engines in zip(sizes, by_size):
        for engine, parts in zip(("Spark", "DuckDB"), engines):
            left = 0.0
            for part in PARTS:
                v = (parts or {}).get(part, 0.0)
                ax2.barh(y, v, left=left, color=colors[engine], alpha=shades[part], edgecolor="white")
                if parts and v >= widest * 0.07:  # room for its label
                    ax2.text(left + v / 2, y, f"{part}\n{v:.1f}", ha="center", va="center", fontsize=7)
                left += v
            ax2.text(left, y, f" {left:.1f} s" if parts else " broadcast join: not split", va="center", fontsize=8)
            labels.append(f"{engine}, {r['left_rows']:,}")
            y += 1
        y += 0.5
    ax2.set_yticks([i + (i // 2) * 0.5 for i in range(len(labels))], labels, fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlabel("CPU seconds (Spark: task CPU; DuckDB: operator time)")
    ax2.set_title("where the CPU goes: read (Spark: and shuffle), join, write, other")
    ax2.set_xlim(right=widest * 1.2)

    save(
        fig,
        path,
        f"bench.batch_vs_duckdb: {result['variant']} {result['window']}, {result['join_type']}; "
        f"DuckDB {result['duckdb']}, {result['duckdb_threads']} threads; {result['date']}",
    )


def print_tables(result: dict[str, Any]) -> None:
    """The result's tables as Markdown (BENCHMARKS.md takes them as they are): wall seconds and the
    answers per size, then CPU seconds by part, and the goal."""
    print("| left events (ds) | right events (ds) | Spark (product path) | DuckDB | Spark ÷ DuckDB | same answer |")
    print("|---|---|---|---|---|---|")
    for r in result["sizes"]:
        print(
            f"| {r['left_rows']:,} | {r['right_rows']:,} | {r['spark_median_s']:.1f} s | {r['duckdb_median_s']:.1f} s "
            f"| {r['ratio']}x | {'yes' if r['same_answer'] else 'NO'} ({r['spark_answer']['rows']:,} rows) |"
        )
    print()
    print("| left events | engine | read (Spark: and shuffle) | join | write | other | total |")
    print("|---|---|---|---|---|---|---|")
    for r in result["sizes"]:
        sp, dk = cpu_parts(r)
        if sp is None:
            unsplit = "not split: a broadcast join reads, joins and writes in one stage"
            print(f"| {r['left_rows']:,} | Spark, task CPU | {unsplit} | | | | |")
        else:
            print(
                f"| {r['left_rows']:,} | Spark, task CPU (the last run; the join from its run into noop) "
                + "".join(f"| {sp[k]} s " for k in PARTS)
                + f"| {round(sum(sp.values()), 2)} s |"
            )
        print(
            f"| {r['left_rows']:,} | DuckDB, operator time (profiled run) "
            + "".join(f"| {dk[k]} s " for k in PARTS)
            + f"| {round(sum(dk.values()), 2)} s |"
        )
    g = result["goal"]
    print(
        f"goal Spark <= {g['target']}x DuckDB at {g['spark_over_duckdb_at']:,}: {g['ratio']}x, "
        f"{'met' if g['met'] else 'NOT met'}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.batch_vs_duckdb", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", default="1000000,10000000", help="sizes, comma-separated (left events in one ds)")
    p.add_argument("--repeat", type=int, default=2, help="timed runs of each engine per size (median)")
    p.add_argument(
        "--max-seconds", type=float, default=300, help="no further run of a size once its runs took this long"
    )
    p.add_argument("--chunk", type=int, default=1_000_000, help="generate sizes above this in chunks of it")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="DuckDB threads (Spark: local[*])")
    p.add_argument("--duckdb-memory", default="4GB", help="DuckDB memory_limit (Spark's driver has 4g)")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-batch-duckdb"), help="scratch folder (wiped)")
    p.add_argument("--out", default=str(PROJECT_ROOT / "var" / "bench-results"), help="batch_vs_duckdb.json here")
    p.add_argument(
        "--plot-from", metavar="JSON", help="only draw the plot of a recorded result (next to it, .png), run nothing"
    )
    args = p.parse_args(argv)
    if args.plot_from:
        recorded = Path(args.plot_from)
        if not recorded.is_file():
            print(f"{p.prog}: --plot-from: {recorded} does not exist: name a batch_vs_duckdb.json", file=sys.stderr)
            return 2
        result = json.loads(recorded.read_text())
        plot(result, recorded.with_suffix(".png"))
        print_tables(result)
        print(f"plot: {recorded.with_suffix('.png')}")
        return 0
    command = shlex.join(["python", "-m", "bench.batch_vs_duckdb", *(sys.argv[1:] if argv is None else argv)])
    sizes = [int(x) for x in args.left_events.split(",")]

    import duckdb
    from pyspark.sql import functions as F

    from jobs.join.columns import col_name
    from jobs.join.conditions import join_events
    from jobs.spec.source import BatchTable
    from jobs.steps import batch as batch_step
    from jobs.storage import batch_input, delta_io
    from jobs.storage.spark import get_spark, join_conf
    from jobs.storage.tables import Tables

    root = Path(args.root).resolve()
    s = scratch_settings(root)
    base = default_spec()
    os.environ["JOINSHIFT_SPARK_UI"] = "true"  # for the per-stage CPU times (this process only)
    spark = get_spark("joinshift-bench-batch-duckdb", s, extra_conf={"spark.ui.port": "0"}, throughput=True)
    stages = StageCpu(spark)
    load_before = os.getloadavg()
    results = []

    def bench_spec(tables: Path):
        def side(st, name):
            bt = BatchTable(path=str(tables / name), format="parquet", ds_column="ds", arrival_column="_arrival_time")
            return st.model_copy(update={"batch_table": bt})

        return base.model_copy(
            update={"pipeline": "batch_vs_duckdb", "left": side(base.left, "left"), "right": side(base.right, "right")}
        )

    parts: dict[str, float] = {}

    def timed(module, name: str, part: str) -> None:
        """Time every call of ``module.name`` into ``parts[part]`` (where run_variant's time goes)."""
        fn = getattr(module, name)

        def wrapper(*a, **k):
            t = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                parts[part] = parts.get(part, 0.0) + time.monotonic() - t

        setattr(module, name, wrapper)

    timed(batch_step, "landed_sides", "landed_days_s")  # which days each side holds (the day-edge rule)
    timed(delta_io, "replace_partitions", "join_and_write_s")  # the join runs inside its Delta write

    def spark_run(spec, ds: date, tag: str) -> tuple[float, dict[str, int], dict[str, float] | None]:
        """(wall seconds, the output's counts, task CPU by part: :func:`bench.stages.spark_parts`)."""
        rs = dataclasses.replace(s, storage_root=str(root / "storage" / f"spark_{tag}"))
        parts.clear()
        wall, ran, rows = stages.run(lambda: batch_step.run_variant(spark, spec, VARIANT, ds, rs))
        parts["rest_s"] = wall - sum(parts.values())  # reading the inputs' schemas, bookkeeping
        out = spark.read.format("delta").load(Tables.of(spec, rs).output(VARIANT)).where(F.col("ds") == F.lit(ds))
        right_id = col_name("right", spec.right.id)
        c = out.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(right_id).alias("pairs"),
            F.countDistinct(F.when(F.col(right_id).isNotNull(), F.col(col_name("left", spec.left.id)))).alias("m"),
        ).first()
        assert c is not None and c["rows"] == rows
        shutil.rmtree(rs.storage_root, ignore_errors=True)
        return wall, output_counts(c["rows"], c["pairs"], c["m"]), spark_parts(ran)

    def duckdb_run(spec, tables: Path, ds: date, tag: str, profile: Path | None = None) -> tuple[float, dict[str, int]]:
        out = root / f"duckdb_{tag}.parquet"
        con = duckdb.connect()
        con.execute(f"SET threads = {args.threads}; SET memory_limit = '{args.duckdb_memory}'; SET TimeZone = 'UTC'")
        con.execute(f"SET temp_directory = '{root / 'duckdb_tmp'}'")
        if profile is not None:
            con.execute(f"PRAGMA enable_profiling = 'json'; PRAGMA profiling_output = '{profile}'")
        t = time.monotonic()
        con.execute(windowed_join_sql(spec, str(tables / "left"), str(tables / "right"), ds, str(out)))
        if profile is not None:
            con.execute("PRAGMA disable_profiling")
        (rows,) = con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()  # type: ignore[misc]
        wall = time.monotonic() - t
        right_id, left_id = col_name("right", spec.right.id), col_name("left", spec.left.id)
        counts = con.execute(
            f'SELECT count(*), count("{right_id}"), count(DISTINCT CASE WHEN "{right_id}" IS NOT NULL '
            f"THEN \"{left_id}\" END) FROM read_parquet('{out}')"
        ).fetchone()
        con.close()
        out.unlink()
        assert counts is not None and counts[0] == rows
        return wall, output_counts(*counts)

    try:
        for i, n in enumerate(sizes):
            tables = root / f"tables_{n}"
            t = time.monotonic()
            made = write_tables(base, n, args.chunk, tables, seed=20261119)
            gen_s = time.monotonic() - t
            spec, ds = bench_spec(tables), made["ds"]
            print(
                f"{n:,} left events: ds {ds} has {made['left']:,} left / {made['right']:,} right rows "
                f"(generated and written in {gen_s:.1f}s)",
                flush=True,
            )
            if i == 0:  # warm-up: Spark's JIT and code generation, DuckDB's first read of the files
                w_s, _, _ = spark_run(spec, ds, "warmup")
                w_d, _ = duckdb_run(spec, tables, ds, "warmup")
                print(f"warm-up: Spark {w_s:.1f}s, DuckDB {w_d:.1f}s", flush=True)
            runs: dict[str, list[float]] = {"spark": [], "duckdb": []}
            spark_times: list[dict[str, float]] = []
            spark_cpu: list[dict[str, float] | None] = []
            answers: dict[str, dict[str, int]] = {}
            for i in range(args.repeat):
                if i and sum(runs["spark"]) + sum(runs["duckdb"]) > args.max_seconds:
                    break
                w, answers["spark"], cpu = spark_run(spec, ds, str(i))
                runs["spark"].append(round(w, 2))
                spark_times.append({k: round(v, 2) for k, v in parts.items()})
                spark_cpu.append(cpu)
                w, answers["duckdb"] = duckdb_run(spec, tables, ds, str(i))
                runs["duckdb"].append(round(w, 2))
                print(f"  run {i}: Spark {runs['spark'][-1]:.1f}s, DuckDB {runs['duckdb'][-1]:.1f}s", flush=True)
            med = {k: statistics.median(v) for k, v in runs.items()}
            # the join alone, into Spark's noop sink: what the Delta write and the product's checks add
            tb = Tables.of(spec, s)
            joined = join_events(
                batch_input.read_side(spark, tb, "left", [ds]),
                batch_input.read_side(spark, tb, "right", [ds]),
                spec,
                windowed=True,
            )
            # under the join's own settings, as run_variant runs it (the session's 4 partitions sort-merge)
            with join_conf(spark, s):
                w, ran, _ = stages.run(joined.write.format("noop").mode("overwrite").save)
            join_noop_s, join_noop_cpu = round(w, 2), spark_parts(ran)
            # DuckDB's operators, in one more run with its profiler on (not among the timed runs)
            profile = root / f"duckdb_profile_{n}.json"
            duckdb_run(spec, tables, ds, "profiled", profile)
            duck_cpu = {k: round(v, 2) for k, v in duckdb_parts(json.loads(profile.read_text())).items()}
            same = answers["spark"] == answers["duckdb"]
            row = {
                "left_events_generated": n,
                "ds": ds.isoformat(),
                "left_rows": made["left"],
                "right_rows": made["right"],
                "spark_s": runs["spark"],
                "duckdb_s": runs["duckdb"],
                "spark_median_s": med["spark"],
                "spark_parts_s": spark_times,
                "spark_task_cpu_s": spark_cpu,
                "spark_join_to_noop_s": join_noop_s,
                "spark_join_to_noop_task_cpu_s": join_noop_cpu,
                "duckdb_cpu_s": duck_cpu,
                "duckdb_median_s": med["duckdb"],
                "ratio": round(med["spark"] / med["duckdb"], 2),
                "spark_answer": answers["spark"],
                "duckdb_answer": answers["duckdb"],
                "same_answer": same,
                "load_avg_after": os.getloadavg(),
            }
            results.append(row)
            print(
                f"  {n:,}: Spark {med['spark']:.1f}s, DuckDB {med['duckdb']:.1f}s, ratio {row['ratio']}x; "
                f"answers {'equal' if same else 'DIFFER'}: Spark {answers['spark']}, DuckDB {answers['duckdb']}; "
                f"Spark's runs {spark_times}, its join into noop {join_noop_s}s",
                flush=True,
            )
            print(
                f"  where the seconds go: Spark's task CPU per run {spark_cpu}, the join into noop {join_noop_cpu}; "
                f"DuckDB's operators {duck_cpu}",
                flush=True,
            )
            shutil.rmtree(tables, ignore_errors=True)
    finally:
        spark.stop()

    largest = max(results, key=lambda r: r["left_events_generated"])
    result = {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpus": os.cpu_count(), "load_avg_before": load_before, "load_avg_after": os.getloadavg()},
        "duckdb": duckdb.__version__,
        "duckdb_threads": args.threads,
        "duckdb_memory_limit": args.duckdb_memory,
        "variant": VARIANT,
        "window": base.window.label(),
        "join_type": base.join.type.value,
        "sizes": results,
        "goal": {
            "spark_over_duckdb_at": largest["left_events_generated"],
            "target": GOAL_RATIO,
            "ratio": largest["ratio"],
            "met": largest["ratio"] <= GOAL_RATIO,
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "batch_vs_duckdb.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out / "batch_vs_duckdb.png")
    print_tables(result)
    print(f"command: {command}")
    return 0 if all(r["same_answer"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
