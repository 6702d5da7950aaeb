"""The benchmarks' own logic, without running them: the issue's goal ratios and the per-record
waterfall of ``bench.decompose``, its reading of ConsumerPerformance's output, and DuckDB's
windowed join in ``bench.batch_vs_duckdb`` (bounds inclusive, left outer, as the spec says), and
``bench.stages``' split of either engine's seconds into reading, the join and the write, and the
DuckDB bench's split of Spark's join stage into the join and the write, and its plot."""

from __future__ import annotations

from datetime import date

import pytest
from tiny_spec import tiny_spec

from bench.decompose import GOALS, goals, increments, parse_consumer_performance


def test_goal_ratios_are_the_issues_and_say_met_or_not():
    rates = {"broker": 400.0, "kafka_source": 100.0, "passthrough": 60.0, "join_delta": 50.0}
    got = {g.name: (g.ratio, g.met) for g in goals(rates)}
    assert got == {
        "pass-through vs Spark's raw Kafka read": (0.6, False),
        "streaming join vs pass-through": (0.833, True),
        "streaming join vs the broker's ceiling": (0.125, False),
    }
    assert [g.target for g in GOALS] == [0.7, 0.8, 0.2]


def test_a_goal_whose_stage_was_not_measured_is_undecided():
    (pt, join, broker) = goals({"kafka_source": 100.0, "passthrough": 80.0})
    assert (pt.ratio, pt.met) == (0.8, True)
    assert join.ratio is join.met is broker.met is None


def test_the_waterfall_adds_microseconds_per_record_stage_by_stage():
    rates = {"broker": 1_000_000.0, "kafka_source": 100_000.0, "parse": 50_000.0, "passthrough": 1.0}
    assert increments(rates) == [("broker", 1.0, 1.0), ("kafka_source", 10.0, 9.0), ("parse", 20.0, 10.0)]


def test_consumer_performance_output_is_read_by_its_header():
    out = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
        "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-24 13:20:01:000, 2026-11-24 13:20:03:500, 95.3674, 38.1470, 400000, 160000.0, 500, 2000, "
        "47.6837, 200000.0\n"
    )
    assert parse_consumer_performance("some warning\n" + out) == {
        "records": 400_000,
        "mb": 95.3674,
        "rebalance_s": 0.5,
        "fetch_s": 2.0,
    }


def test_duckdb_windowed_join_matches_on_the_key_with_both_bounds_inclusive(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    from bench.batch_vs_duckdb import windowed_join_sql

    spec = tiny_spec()  # window [-10m, +5m], left outer
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for side, rows in {
        "left": ["('l1', 'a', TIMESTAMPTZ '2026-11-20 12:00:00')", "('l2', 'b', TIMESTAMPTZ '2026-11-20 12:00:00')"],
        "right": [
            "('r1', 'a', TIMESTAMPTZ '2026-11-20 11:50:00')",  # lower bound: in
            "('r2', 'a', TIMESTAMPTZ '2026-11-20 12:05:00')",  # upper bound: in
            "('r3', 'a', TIMESTAMPTZ '2026-11-20 12:05:01')",  # past the upper bound
            "('r4', 'c', TIMESTAMPTZ '2026-11-20 12:00:00')",  # another key
        ],
    }.items():
        (tmp_path / side / "ds=2026-11-20").mkdir(parents=True)
        con.execute(
            f"COPY (SELECT *, t AS _arrival_time FROM (VALUES {', '.join(rows)}) v(event_id, k, t)) "
            f"TO '{tmp_path / side / 'ds=2026-11-20' / 'part.parquet'}' (FORMAT parquet)"
        )
    out = tmp_path / "out.parquet"
    con.execute(windowed_join_sql(spec, str(tmp_path / "left"), str(tmp_path / "right"), date(2026, 11, 20), str(out)))
    got = con.execute(
        f"SELECT left_event_id, right_event_id FROM read_parquet('{out}') ORDER BY 1, 2 NULLS LAST"
    ).fetchall()
    assert got == [("l1", "r1"), ("l1", "r2"), ("l2", None)]


def test_spark_stages_split_into_reading_the_join_and_the_rest_by_their_shuffles():
    from bench.stages import spark_parts

    stages = [
        {"status": "COMPLETE", "shuffleWriteBytes": 10, "shuffleReadBytes": 0, "executorCpuTime": 2_000_000_000},
        {"status": "COMPLETE", "shuffleWriteBytes": 20, "shuffleReadBytes": 0, "executorCpuTime": 3_000_000_000},
        {"status": "COMPLETE", "shuffleWriteBytes": 0, "shuffleReadBytes": 30, "executorCpuTime": 7_500_000_000},
        {"status": "COMPLETE", "shuffleWriteBytes": 0, "shuffleReadBytes": 0, "executorCpuTime": 250_000_000},
        {"status": "SKIPPED", "shuffleWriteBytes": 10, "shuffleReadBytes": 0, "executorCpuTime": 9_000_000_000},
    ]
    assert spark_parts(stages) == {"read": 5.0, "join": 7.5, "other": 0.25}
    broadcast = [{"status": "COMPLETE", "shuffleWriteBytes": 0, "shuffleReadBytes": 0, "executorCpuTime": 10**9}]
    assert spark_parts(broadcast) is None  # read, join and write in one stage: no split to give


def test_duckdb_profile_of_the_bench_join_splits_into_reading_the_join_and_the_write(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    import json

    from bench.batch_vs_duckdb import windowed_join_sql
    from bench.stages import duckdb_parts

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for side in ("left", "right"):
        (tmp_path / side / "ds=2026-11-20").mkdir(parents=True)
        con.execute(
            "COPY (SELECT 'e' || i AS event_id, 'k' || (i % 1000) AS k, "
            "TIMESTAMPTZ '2026-11-20 12:00:00' + to_seconds(i % 600) AS t, t AS _arrival_time FROM range(20000) r(i)) "
            f"TO '{tmp_path / side / 'ds=2026-11-20' / 'part.parquet'}' (FORMAT parquet)"
        )
    profile = tmp_path / "profile.json"
    con.execute(f"PRAGMA enable_profiling = 'json'; PRAGMA profiling_output = '{profile}'")
    sql = windowed_join_sql(tiny_spec(), str(tmp_path / "left"), str(tmp_path / "right"), date(2026, 11, 20), "x")
    con.execute(sql.replace("TO 'x'", f"TO '{tmp_path / 'out.parquet'}'"))
    con.execute("PRAGMA disable_profiling")
    parts = duckdb_parts(json.loads(profile.read_text()))
    assert set(parts) == {"read", "join", "write", "other", "total"}
    assert parts["read"] > 0 and parts["join"] > 0 and parts["write"] > 0  # each operator found by its type
    assert parts["total"] > 0


def _duckdb_bench_size(left_rows: int, spark_cpu: dict | None, noop_cpu: dict | None) -> dict:
    return {
        "left_rows": left_rows,
        "spark_median_s": 40.0,
        "duckdb_median_s": 13.0,
        "ratio": 3.08,
        "right_rows": left_rows * 2,
        "same_answer": True,
        "spark_answer": {"rows": left_rows * 3},
        "spark_task_cpu_s": [{"read": 9.0, "join": 50.0, "other": 0.3}, spark_cpu],
        "spark_join_to_noop_task_cpu_s": noop_cpu,
        "duckdb_cpu_s": {"read": 1.8, "join": 5.9, "write": 18.1, "other": 0.0, "total": 25.8},
    }


def test_the_duckdb_bench_splits_sparks_cpu_with_the_write_as_the_join_stage_less_the_noop_join(tmp_path, capsys):
    """Spark's stage that joins also writes: its write is that stage's CPU less the join's into noop,
    from the last timed run; a broadcast join (no shuffle read, no split) is not split; the tables
    and the plot show both kinds."""
    from bench.batch_vs_duckdb import cpu_parts, plot, print_tables

    split = _duckdb_bench_size(9_974_913, {"read": 13.6, "join": 55.2, "other": 0.1}, {"read": 13.5, "join": 17.4})
    assert cpu_parts(split) == (
        {"read": 13.6, "join": 17.4, "write": 37.8, "other": 0.1},
        {"read": 1.8, "join": 5.9, "write": 18.1, "other": 0.0},
    )
    broadcast = _duckdb_bench_size(99_812, None, {"read": 0.4, "join": 0.6})
    spark, duck = cpu_parts(broadcast)
    assert spark is None and duck["write"] == 18.1

    result = {
        "sizes": [broadcast, split],
        "goal": {"target": 3.0, "spark_over_duckdb_at": 10_000_000, "ratio": 3.08, "met": False},
        "variant": "batch_1d_windowed",
        "window": "[-3h, +30m]",
        "join_type": "left_outer",
        "duckdb": "2.0.0",
        "duckdb_threads": 2,
        "date": "2026-12-06 17:31 UTC",
    }
    print_tables(result)
    table = capsys.readouterr().out
    assert (
        "| 9,974,913 | Spark, task CPU (the last run; the join from its run into noop) | 13.6 s | 17.4 s | 37.8 s "
        in table
    )
    assert "| 99,812 | Spark, task CPU | not split" in table and "| 99,812 | DuckDB, operator time" in table
    assert "goal Spark <= 3.0x DuckDB at 10,000,000: 3.08x, NOT met" in table
    plot(result, tmp_path / "batch_vs_duckdb.png")
    assert (tmp_path / "batch_vs_duckdb.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_scaling_bench_sums_state_over_operators_per_batch_and_keeps_the_peak():
    from datetime import timedelta

    from bench.scaling import parse_span, state_peak

    def op(rows, mem, sst, name="dedupeWithinWatermark"):
        return {
            "operatorName": name,
            "numRowsTotal": rows,
            "memoryUsedBytes": mem,
            "customMetrics": {"rocksdbSstFileSize": sst},
        }

    progress = [
        {"stateOperators": [op(10, 100, 7, "symmetricHashJoin"), op(5, 50, 3)]},
        {"stateOperators": [op(8, 90, 1, "symmetricHashJoin"), op(9, 20, 1)]},  # more rows, less memory
        {},
    ]
    # each peak on its own; the join's own rows and memory apart from the de-duplication's ids
    assert state_peak(progress) == {
        "state_rows": 17,
        "state_bytes": 150,
        "state_sst_bytes": 10,
        "join_rows": 10,
        "join_bytes": 100,
        "dedup_rows": 9,
    }
    keys = ("state_rows", "state_bytes", "state_sst_bytes", "join_rows", "join_bytes", "dedup_rows")
    assert state_peak([]) == dict.fromkeys(keys, 0)
    assert parse_span("-3h..+30m") == (timedelta(hours=-3), timedelta(minutes=30))


@pytest.mark.parametrize(
    ("args", "says"),
    [(["--parts", "live,nope"], "--parts takes"), (["--slice-minutes", "0"], "--slice-minutes must be positive")],
)
def test_the_scaling_bench_refuses_an_unknown_part_or_a_slice_of_no_time(args, says, capsys):
    from bench.scaling import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_the_scaling_plot_draws_only_the_parts_that_ran(tmp_path):
    from PIL import Image

    from bench.scaling import plot

    point = {"label": "window -3h..+30m", "join_rows": 900, "predicted_join_rows": 1000, "dedup_rows": 500}
    point |= {"predicted_dedup_rows": 520, "predicted_live_dedup_rows": 400}
    live = {"command": "python -m bench.scaling --parts live", "live_mode": "replay-as-live, 60-minute slices"}
    plot({**live, "live": [{**point, "predicted_live_join_rows": 700}]}, tmp_path / "live.png")
    rates = [{"label": f"{n} partitions", "events_per_s": 1000 * n} for n in (1, 2)]
    plot({**live, "partitions": rates, "live": [{**point, "predicted_live_join_rows": 700}]}, tmp_path / "two.png")
    one, two = Image.open(tmp_path / "live.png").size, Image.open(tmp_path / "two.png").size
    assert two[0] > 1.4 * one[0] and two[1] == one[1]  # a panel each, side by side


@pytest.mark.parametrize(("arg", "says"), [("--lag=x", "--lag takes a duration"), ("--lag=-1h", "0s or more")])
def test_the_paced_bench_refuses_a_lag_that_is_not_a_duration_of_0s_or_more(arg, says, capsys):
    from bench.paced import main

    with pytest.raises(SystemExit) as exc:
        main([arg])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--repeat", "0"], ["--warmup", "-1"]])
def test_the_sweep_bench_refuses_no_timed_run_or_a_negative_warm_up(args, capsys):
    from bench.window_sweep import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "--repeat takes 1 or more" in capsys.readouterr().err


def test_the_watermark_passes_a_threshold_at_the_first_arrival_of_an_event_past_it_by_the_delay():
    from bench.latency import watermark_passes_at

    event = [10_000, 50_000, 40_000, 90_000]
    arrival = [11_000, 70_000, 60_000, 91_000]
    # a 5 s delay: past 30 s once an event after 35 s arrived: the one at 40 s, at 60 s, before the
    # one at 50 s; past 45 s only by the one at 90 s; past 85 s never (90 s - 5 s is not past it)
    got = watermark_passes_at(event, arrival, 5, [30_000, 44_999, 45_000, 84_999, 85_000])
    assert got.tolist() == [60_000, 70_000, 91_000, 91_000, float("inf")]


def test_a_non_match_splits_into_the_datas_wait_for_the_watermark_and_the_engines_share():
    from types import SimpleNamespace as Row

    from bench.latency import unmatched_split

    # window upper 60 s; left watermark 0 s, right 30 s. The left event at 0 s is final once both
    # watermarks are past 60 s: the left's at the arrival of a left event after 60 s (61 s), the
    # right's at the arrival of a click after 90 s (the click at 95 s, arriving at 99 s): 99 s of
    # data, 9 s beyond upper + the right watermark (no click after 90 s arrived before 99 s: the
    # freshest trailed the wall clock). Emitted at 107 s: 8 s of engine.
    left = ([0, 61_000], [500, 61_000])
    right = ([80_000, 95_000, 120_000], [130_000, 99_000, 121_000])
    rows = [Row(latency=107.0, left_ms=0, emitted_ms=107_000)]
    got = unmatched_split(rows, [(left, 0.0), (right, 30.0)], 60.0)
    assert got["watermark_never_passed"] == 0
    assert (got["data_p99_s"], got["freshness_lag_p99_s"], got["engine_p99_s"]) == (99.0, 9.0, 8.0)
    assert got["the_p99_row"] == {"latency_s": 107.0, "data_s": 99.0, "freshness_lag_s": 9.0, "engine_s": 8.0}


def test_the_latency_bench_reads_the_generators_times_as_milliseconds_and_keeps_the_published():
    import pandas as pd

    from bench.latency import _published

    t = pd.to_datetime([1_000, 2_000, 9_000], unit="ms", utc=True).as_unit("ms")  # the generator's unit
    side = pd.DataFrame({"event_time": t, "arrival_time": t + pd.Timedelta(seconds=1)})
    event, arrival = _published(side, 2_000, 10_000)  # the last one arrives at the stop: not published
    assert (event.tolist(), arrival.tolist()) == ([1_000, 2_000], [2_000, 3_000])
