"""Data-quality gates (jobs.quality) on tiny hand-built Delta tables in the exact landed, output and
metrics shapes, each module-level scenario under its own storage root.

Demo spec: window [-3h, +30m], left outer, 1-to-n, timestamp validity [arrival - 2d, arrival + 1h],
accuracy tolerance 1.5 pp against batch_1d_windowed. ds = 2026-11-20, UTC.

Good data (every gate passes)::

    left   L1 s1 12:00   L2 s2 13:00   L3 s3 14:00 (no click: an unmatched left-outer row)
    right  R1 s1 12:10   R2 s1 11:00   R3 s2 13:05
    output (L1,R1) (L1,R2) (L2,R3) (L3,null)       match rate 2/3 for stream and windowed

Bad data (each row breaks one rule)::

    left   + L4 with null session_id              -> not_null(session_id)
           + L1 again (a re-sent record)           -> unique(event_id)
           + L5 event time 3d before arrival      -> between(_gx_lateness_s)
           + L6 arrived 2026-11-21 00:30, ds 11-20 -> pair_equal(ds, _gx_arrival_ds)
    right  + R9 event time 3h after arrival       -> between(_gx_lateness_s)
    output + (L1,R1) again                        -> compound_unique(left_event_id, right_event_id)
           L3's row gets right_action 'click'     -> be_null(right_action) where right_event_id is null
    metrics stream 1/3 vs windowed 2/3            -> between(stream_minus_baseline_pp)
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from jobs.accuracy.compare import METRIC_COLUMNS
from jobs.join.conditions import join_events
from jobs.quality.gates import (
    GateFailed,
    assert_gates,
    gates_path,
    prepare_frame,
    run_gates,
    validate_frame,
    write_gate_results,
)
from jobs.quality.suites import (
    EXPECTATIONS_DIR,
    KINDS,
    build_suites,
    load_suites,
    suite_dict,
    suites_out_of_sync,
    write_suites,
)
from jobs.spec import SCHEMA_TYPES, Cardinality, Corrections, Engine, JoinOptions, JoinType
from jobs.storage import delta_io
from jobs.storage.tables import Tables

pytestmark = pytest.mark.integration

DS = date(2026, 11, 20)
METRICS_SCHEMA = (
    "ds date, variant string, left_events bigint, matched_left bigint, match_rate double, "
    "pairs bigint, to_lower_p1 double, to_lower_p50 double, to_lower_p99 double, "
    "to_upper_p1 double, to_upper_p50 double, to_upper_p99 double, computed_at timestamp"
)


def t(hhmm: str, day: int = 20) -> datetime:
    h, m = (int(x) for x in hhmm.split(":"))
    return datetime(2026, 11, day, h, m, tzinfo=UTC)


def landed(spark, spec, side: str, rows: list[tuple]):
    """rows: (event_id, session_id, event_time, arrival, payload_a, payload_b[, ds]) -> landed shape."""
    st = spec.side(side)
    schema = ", ".join(f"{c} {SCHEMA_TYPES[ty]}" for c, ty in st.schema_.items())
    schema += ", _arrival_time timestamp, _partition int, _offset bigint, ds date"
    out = []
    for i, (eid, sid, et, arr, a, b, *ds) in enumerate(rows):
        out.append((eid, sid, et, a, b, arr, 0, i, ds[0] if ds else arr.date()))
    return spark.createDataFrame(out, schema)


def good_left(spark, spec):
    return landed(
        spark,
        spec,
        "left",
        [
            ("L1", "s1", t("12:00"), t("12:01"), "shoes", 10),
            ("L2", "s2", t("13:00"), t("13:01"), "hats", 3),
            ("L3", "s3", t("14:00"), t("14:01"), "gloves", 0),
        ],
    )


def good_right(spark, spec):
    return landed(
        spark,
        spec,
        "right",
        [
            ("R1", "s1", t("12:10"), t("12:20"), "click", 1),
            ("R2", "s1", t("11:00"), t("12:30"), "click", 2),
            ("R3", "s2", t("13:05"), t("13:06"), "add_to_cart", 1),
        ],
    )


def metrics_rows(spark, stream_rate: float, baseline_rate: float):
    now = datetime(2026, 11, 21, 1, 0, tzinfo=UTC)
    rows = [
        (DS, v, 3, round(r * 3), r, round(r * 3), *([None] * 6), now)
        for v, r in (("stream", stream_rate), ("batch_1d_windowed", baseline_rate))
    ]
    return spark.createDataFrame(rows, METRICS_SCHEMA)


def test_metrics_rows_have_the_compare_jobs_shape():
    assert METRICS_SCHEMA.replace(",", "").split()[::2] == [*METRIC_COLUMNS, "computed_at"]


def write(df, path: str) -> None:
    delta_io.replace_partitions(df, path, {"ds": [DS]})


def failures(result) -> set[tuple[str, str]]:
    return {(f["expectation"], f["column"]) for f in result.failures}


def by_suite(results) -> dict:
    return {r.suite: r for r in results}


@pytest.fixture(scope="module")
def good(spark, demo_spec, test_settings, tmp_path_factory):
    """Landed tables, the stream output and metrics (stream = windowed = 2/3) that pass every gate."""
    s = dataclasses.replace(test_settings, storage_root=str(tmp_path_factory.mktemp("quality_good")))
    tables = Tables.of(demo_spec, s)
    left, right = good_left(spark, demo_spec), good_right(spark, demo_spec)
    write(left, tables.landed("left"))
    write(right, tables.landed("right"))
    out = join_events(left, right, demo_spec, windowed=True)
    write(out, tables.output("stream"))
    write(metrics_rows(spark, 2 / 3, 2 / 3), tables.match_metrics)
    return s


@pytest.fixture(scope="module")
def bad(spark, demo_spec, test_settings, tmp_path_factory):
    s = dataclasses.replace(test_settings, storage_root=str(tmp_path_factory.mktemp("quality_bad")))
    tables = Tables.of(demo_spec, s)
    left = good_left(spark, demo_spec).unionByName(
        landed(
            spark,
            demo_spec,
            "left",
            [
                ("L4", None, t("12:00"), t("12:01"), "socks", 1),  # null key
                ("L1", "s1", t("12:00"), t("12:05"), "shoes", 10),  # re-sent id
                ("L5", "s5", t("12:00", day=17), t("12:00"), "old", 1),  # 3d before arrival
                ("L6", "s6", t("00:20", day=21), t("00:30", day=21), "late", 1, DS),  # arrived the next day
            ],
        )
    )
    right = good_right(spark, demo_spec).unionByName(
        landed(
            spark,
            demo_spec,
            "right",
            [
                ("R9", "s2", t("15:00"), t("12:00"), "click", 4),  # 3h after arrival
            ],
        )
    )
    write(left, tables.landed("left"))
    write(right, tables.landed("right"))
    out = join_events(good_left(spark, demo_spec), good_right(spark, demo_spec), demo_spec, windowed=True)
    out = out.withColumn(
        "right_action", F.when(F.col("left_event_id") == "L3", F.lit("click")).otherwise(F.col("right_action"))
    )
    out = out.unionByName(out.where("left_event_id = 'L1' AND right_event_id = 'R1'"))
    write(out, tables.output("stream"))
    write(metrics_rows(spark, 1 / 3, 2 / 3), tables.match_metrics)
    return s


# ---------------------------------------------------------------- suites as files


def _snapshot(root: Path) -> dict[str, tuple[float, int]]:
    return {str(p): (p.stat().st_mtime, p.stat().st_size) for p in root.rglob("*")}


def test_suite_files_in_repo_are_in_sync_with_the_spec(demo_spec):
    before = _snapshot(EXPECTATIONS_DIR)
    assert suites_out_of_sync(demo_spec) == [], (
        "expectations/ differs from build_suites(spec): run "
        "`joinshift quality write-suites --spec include/specs/search_sessions.yaml`"
    )
    loaded = load_suites(demo_spec)  # through GX's file context
    built = build_suites(demo_spec)
    assert set(loaded) == set(KINDS)
    assert {k: suite_dict(v) for k, v in loaded.items()} == {k: suite_dict(v) for k, v in built.items()}
    assert _snapshot(EXPECTATIONS_DIR) == before, "opening the file context must not write to expectations/"
    assert sorted(p.relative_to(EXPECTATIONS_DIR).as_posix() for p in EXPECTATIONS_DIR.rglob("*") if p.is_file()) == [
        "expectations/search_sessions/accuracy.json",
        "expectations/search_sessions/join_output.json",
        "expectations/search_sessions/raw_left.json",
        "expectations/search_sessions/raw_right.json",
        "great_expectations.yml",
    ]


def test_a_spec_change_without_regenerating_is_detected(demo_spec, tmp_path):
    changed = demo_spec.model_copy(
        update={
            "accuracy": demo_spec.accuracy.model_copy(update={"tolerance_pp": 2.0}),
            "join": JoinOptions(type=JoinType.left_outer, cardinality=Cardinality.one_to_one),
        }
    )
    assert suites_out_of_sync(changed) == ["join_output", "accuracy"]
    write_suites(changed, tmp_path / "gx")
    assert suites_out_of_sync(changed, tmp_path / "gx") == []
    acc = load_suites(changed, tmp_path / "gx", ["accuracy"])["accuracy"]
    assert acc.expectations[0].min_value == -2.0


# ---------------------------------------------------------------- gates on Delta tables


def test_all_gates_pass_on_good_data_and_results_are_recorded(spark, demo_spec, good):
    results = run_gates(spark, demo_spec, DS, good)
    assert [r.suite for r in results] == list(KINDS)
    for r in results:
        assert r.success is True, r.summary
        assert r.failed == 0 and r.evaluated > 0 and r.failures == []
        assert f"{r.suite}: {r.evaluated}/{r.evaluated} passed" in r.summary
    # raw: 1 column set + 7 types + 1 key + id not-null + id unique + event time + lateness + ds
    assert by_suite(results)["raw_left"].evaluated == 14
    # output: column set + left id + pair + 7 right columns null when unmatched
    assert by_suite(results)["join_output"].evaluated == 10
    assert "stream 66.67% vs batch_1d_windowed 66.67%" in by_suite(results)["accuracy"].summary
    assert_gates(results)  # does not raise

    path = write_gate_results(spark, demo_spec, DS, results, good)
    write_gate_results(spark, demo_spec, DS, results, good)  # a rerun replaces the ds partition
    assert path == Tables.of(demo_spec, good)._t("quality_gates") == gates_path(demo_spec, good)
    rows = spark.read.format("delta").load(path).where(F.col("ds") == F.lit(DS)).collect()
    assert sorted(r.suite for r in rows) == sorted(KINDS)
    assert all(r.success and r.pipeline == "search_sessions" and json.loads(r.failures) == [] for r in rows)
    assert [f.name for f in spark.read.format("delta").load(path).schema.fields][:3] == ["ds", "pipeline", "suite"]
    assert [r.as_report() for r in results][0].keys() == {"suite", "success", "evaluated", "failed", "summary"}


def test_each_rule_fails_on_data_that_breaks_it(spark, demo_spec, bad):
    results = by_suite(run_gates(spark, demo_spec, DS, bad))
    expected = {
        "raw_left": {
            ("expect_column_values_to_not_be_null", "session_id"),
            ("expect_column_values_to_be_unique", "event_id"),
            ("expect_column_values_to_be_between", "_gx_lateness_s"),
            ("expect_column_pair_values_to_be_equal", "ds,_gx_arrival_ds"),
        },
        "raw_right": {("expect_column_values_to_be_between", "_gx_lateness_s")},
        "join_output": {
            ("expect_compound_columns_to_be_unique", "left_event_id,right_event_id"),
            ("expect_column_values_to_be_null", "right_action"),
        },
        "accuracy": {("expect_column_values_to_be_between", "stream_minus_baseline_pp")},
    }
    for suite, want in expected.items():
        r = results[suite]
        assert r.success is False and failures(r) == want, r.summary
        assert r.failed == len(want)
    raw_left = results["raw_left"].summary
    assert raw_left.startswith("raw_left: 10/14 passed (7 rows); FAILED ")
    assert "FAILED expect_column_values_to_not_be_null(session_id): 1 unexpected" in raw_left
    assert "FAILED expect_column_values_to_be_unique(event_id): 2 unexpected (e.g. 'L1'; 'L1')" in raw_left
    assert "FAILED expect_column_values_to_be_between(_gx_lateness_s): 1 unexpected (e.g. 259200)" in raw_left
    assert "FAILED expect_column_pair_values_to_be_equal(ds,_gx_arrival_ds): 1 unexpected" in raw_left
    assert (
        "FAILED expect_column_values_to_be_between(_gx_lateness_s): 1 unexpected (e.g. -10800)"
        in results["raw_right"].summary
    )
    out = results["join_output"].summary
    assert "FAILED expect_compound_columns_to_be_unique(left_event_id,right_event_id): 2 unexpected" in out
    assert "FAILED expect_column_values_to_be_null(right_action): 1 unexpected (e.g. 'click')" in out
    assert (
        "FAILED expect_column_values_to_be_between(stream_minus_baseline_pp): 1 unexpected (e.g. -33.3333)"
        in results["accuracy"].summary
    )

    with pytest.raises(GateFailed) as exc:
        assert_gates(list(results.values()))
    msg = str(exc.value)
    assert msg.startswith("4 of 4 data quality gates failed:")
    assert all(r.summary in msg for r in results.values())

    path = write_gate_results(spark, demo_spec, DS, list(results.values()), bad)
    rows = {r.suite: r for r in spark.read.format("delta").load(path).collect()}
    assert set(rows) == set(KINDS) and not any(r.success for r in rows.values())
    assert {(f["expectation"], f["column"]) for f in json.loads(rows["raw_right"].failures)} == expected["raw_right"]


def test_one_to_one_and_inner_rules(spark, demo_spec, good, tmp_path):
    """A 1-to-1 inner spec: the 1-to-n left-outer output breaks both rules; its own output passes."""
    strict = demo_spec.model_copy(update={"join": JoinOptions(type=JoinType.inner, cardinality=Cardinality.one_to_one)})
    write_suites(strict, tmp_path / "gx")
    [r] = run_gates(spark, strict, DS, good, kinds=["join_output"], suites_dir=tmp_path / "gx")
    assert r.suite == "join_output" and r.success is False
    assert failures(r) == {
        ("expect_column_values_to_be_unique", "left_event_id"),
        ("expect_column_values_to_not_be_null", "right_event_id"),
    }, r.summary
    assert "FAILED expect_column_values_to_be_unique(left_event_id): 2 unexpected (e.g. 'L1'; 'L1')" in r.summary
    assert "FAILED expect_column_values_to_not_be_null(right_event_id): 1 unexpected" in r.summary

    suite = load_suites(strict, tmp_path / "gx", ["join_output"])["join_output"]
    own = join_events(good_left(spark, demo_spec), good_right(spark, demo_spec), strict, windowed=True)
    ok = validate_frame(prepare_frame(own, strict, "join_output"), suite, "join_output")  # as the gate shell does
    assert ok.success is True and ok.evaluated == 5, ok.summary


def test_a_gate_failing_on_a_suite_the_spec_has_outgrown_says_to_regenerate_it(spark, demo_spec, good, tmp_path):
    """Suites written for a spec with late corrections (their output has revision and amended_at)
    checking the output of a spec without them: the column set fails, and the message names the fix."""
    paced = demo_spec.model_copy(
        update={
            "streaming": demo_spec.streaming.model_copy(update={"engine": Engine.paced}),
            "corrections": Corrections.model_validate({"horizon": "12h"}),
        }
    )
    write_suites(paced, tmp_path / "gx")
    [r] = run_gates(spark, demo_spec, DS, good, kinds=["join_output"], suites_dir=tmp_path / "gx")
    assert r.success is False and failures(r) == {("expect_table_columns_to_match_set", "")}, r.summary
    assert "missing ['amended_at', 'revision']" in r.summary
    assert r.summary.endswith("`joinshift quality write-suites --spec <spec>` regenerates it")
    [ok] = run_gates(spark, paced, DS, good, kinds=["join_output"], suites_dir=tmp_path / "gx")
    assert "write-suites" not in ok.summary  # in sync: no hint, whatever the verdict


def test_missing_tables_are_skipped_not_crashed(spark, demo_spec, test_settings, tmp_path):
    s = dataclasses.replace(test_settings, storage_root=str(tmp_path))
    results = run_gates(spark, demo_spec, DS, s)
    assert [r.suite for r in results] == list(KINDS)
    assert all(r.success is None and r.skipped and r.evaluated == 0 for r in results)
    assert results[0].summary == f"raw_left: skipped: table missing ({Tables.of(demo_spec, s).landed('left')})"
    assert_gates(results)  # skipped is not failed ...
    with pytest.raises(GateFailed, match="raw_left: skipped: table missing"):
        assert_gates(results, allow_skipped=False)  # ... unless the caller says so
