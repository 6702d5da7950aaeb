"""End to end on the real parts: generate -> Kafka -> (simulated real time) streaming join,
land -> batch baselines -> compare, every step run by its Airflow DAG with ``dag.test()``.

Expectations are computed independently from the generator's truth (pandas), so the batch
variants must be exact; the stream must equal the windowed join over all days minus exactly the
records its watermark dropped, and those drops must match Spark's own count.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest
from demo_pipeline import ARRIVAL_DAYS, DAYS
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

pytestmark = [pytest.mark.integration, pytest.mark.airflow]


@pytest.fixture(scope="module")
def pipeline(demo_pipeline):
    return demo_pipeline.workload


def _read(spark, path):
    return spark.read.format("delta").load(path)


def _pairs(df, where=None):
    if where is not None:
        df = df.where(where)
    return {(r.left_event_id, r.right_event_id) for r in df.select("left_event_id", "right_event_id").collect()}


def _pair_frame(df, where):
    """The distinct (left_event_id, right_event_id) pairs of ``df`` where ``where`` holds: compared
    as sets, like :func:`_pairs`."""
    return df.where(where).select("left_event_id", "right_event_id").distinct()


def _same_pairs(a, b, where) -> bool:
    try:
        assertDataFrameEqual(_pair_frame(a, where), _pair_frame(b, where))
    except AssertionError:
        return False
    return True


def _expected_pairs(left: pd.DataFrame, right: pd.DataFrame, spec, right_days: int | None, windowed: bool):
    """Pandas reference join. right_days: 0 = same ds, 1 = ds±1, None = any day."""
    lo, up = timedelta(seconds=spec.window.lower_seconds), timedelta(seconds=spec.window.upper_seconds)
    left = left.assign(ds=left["arrival_time"].dt.date)
    right = right.assign(ds=right["arrival_time"].dt.date)
    m = left.merge(right, on="key", suffixes=("_l", "_r"))
    if right_days is not None:
        gap = (pd.to_datetime(m["ds_r"]) - pd.to_datetime(m["ds_l"])).dt.days
        m = m[gap.abs() <= right_days]
    if windowed:
        m = m[(m["event_time_r"] >= m["event_time_l"] + lo) & (m["event_time_r"] <= m["event_time_l"] + up)]
    pairs = set(zip(m["event_id_l"], m["event_id_r"]))
    matched = {lid for lid, _ in pairs}
    return pairs | {(lid, None) for lid in left["event_id"] if lid not in matched}, left


def test_landing_accounts_for_every_record(pipeline, spark, demo_spec, test_settings):
    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    log = _read(spark, t.landing_log).toPandas()
    records = pipeline.records
    for side in ("left", "right"):
        topic = demo_spec.side(side).topic
        mine = log[log.side == side]
        assert sorted(mine.ds) == ARRIVAL_DAYS
        assert int(mine.records.sum()) == int((records.topic == topic).sum())
        assert int((mine.landed + mine.quarantined - mine.records).abs().sum()) == 0
        q = _read(spark, t.quarantine).where(f"stage = 'landing' AND topic = '{topic}'").toPandas()
        expected = records[(records.topic == topic) & records.expected_reason.notna()].expected_reason.value_counts()
        assert q.reason.value_counts().sort_index().to_dict() == expected.sort_index().to_dict()
        assert q.raw_value.notna().all() and (q["offset"] >= 0).all()
        landed_ids = {r[0] for r in _read(spark, t.landed(side)).select(demo_spec.side(side).id).collect()}
        assert landed_ids == set(getattr(pipeline, side).event_id)


@pytest.mark.parametrize(
    "variant,right_days,windowed",
    [
        ("batch_1d_1d", 0, False),
        ("batch_1d_2d", 1, False),
        ("batch_1d_windowed", 0, True),
        # no daily cut-off: [-3h, +30m] reaches ds-1 and ds+1, and the window decides
        ("reference", 1, True),
    ],
)
def test_batch_variants_are_exact(pipeline, spark, demo_spec, test_settings, variant, right_days, windowed):
    from jobs.join.variants import right_days as variant_days
    from jobs.storage.tables import Tables

    d = DAYS[-1]  # the product reads the days the oracle reads
    assert variant_days(demo_spec, variant, d) == [d + timedelta(days=o) for o in range(-right_days, right_days + 1)]

    out = _read(spark, Tables.of(demo_spec, test_settings).output(variant))
    expected, left = _expected_pairs(pipeline.left, pipeline.right, demo_spec, right_days, windowed)
    want = []
    for ds in DAYS:  # per left ds: the ds column names the day of any difference
        ids = set(left[left.ds == ds].event_id)
        want += [Row(ds=ds, left_event_id=lid, right_event_id=rid) for lid, rid in expected if lid in ids]
    got = out.where(F.col("ds").isin(DAYS)).select("ds", "left_event_id", "right_event_id").distinct()
    assertDataFrameEqual(got, want)


def test_batch_1d_2d_finds_what_the_midnight_cutoff_hides(pipeline, spark, demo_spec, test_settings):
    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    days = ", ".join(f"'{d}'" for d in DAYS)
    one = _pairs(_read(spark, t.output("batch_1d_1d")), f"right_event_id IS NOT NULL AND ds IN ({days})")
    two = _pairs(_read(spark, t.output("batch_1d_2d")), f"right_event_id IS NOT NULL AND ds IN ({days})")
    assert one < two  # strictly more: late clicks that landed in the next ds


def test_stream_equals_windowed_join_minus_exactly_what_the_watermark_dropped(
    pipeline, spark, demo_spec, test_settings
):
    from jobs.accuracy.attribution import SPARK_POLICY, stream_view
    from jobs.join.conditions import join_events
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    progress = read_progress(t.progress_log(JOIN_QUERY))
    spark_dropped = sum(
        op.get("numRowsDroppedByWatermark", 0)
        for p in {p["batchId"]: p for p in progress}.values()
        for op in p["stateOperators"]
    )
    assert spark_dropped > 0  # the workload's hours-late clicks must cost the stream something
    # re-sent records reach the join too (the sink writes their pairs once); landing quarantined them
    resent = _read(spark, t.quarantine).where("stage = 'landing' AND reason = 'duplicate_event_id'").count()
    stream = _read(spark, t.output("stream"))
    assert stream.groupBy("left_event_id", "right_event_id").count().where("count > 1").count() == 0

    landed = _read(spark, t.landed("left")), _read(spark, t.landed("right"))
    # the product's own view (Spark's policy for chained operators) explains the output exactly;
    # the other policy does not, so the test can tell them apart
    for policy, explains in ((None, True), (other_policy := "current", False)):
        left, right = stream_view(spark, demo_spec, *landed, progress, *([policy] if policy else []))
        left, right = left.cache(), right.cache()
        assert left.where("_batch_id IS NULL").count() == 0 and right.where("_batch_id IS NULL").count() == 0
        dropped = left.where("_dropped_late").count() + right.where("_dropped_late").count()
        ann = ("_batch_id", "_watermark", "_dropped_late")
        kept = join_events(
            left.where("NOT _dropped_late").drop(*ann),
            right.where("NOT _dropped_late").drop(*ann),
            demo_spec,
            windowed=True,
        )
        same = dropped <= spark_dropped <= dropped + resent and all(
            _same_pairs(stream, kept, f"ds = '{ds}' AND right_event_id IS NOT NULL") for ds in DAYS
        )
        assert same == explains, f"policy {policy or SPARK_POLICY}: dropped {dropped}, Spark {spark_dropped}"
    assert other_policy != SPARK_POLICY


def test_compare_reports_match_rates_and_boundary_deltas(pipeline, spark, demo_spec, test_settings):
    from jobs.accuracy.compare import summary_rows
    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    metrics = [r.asDict() for r in _read(spark, t.match_metrics).collect()]
    assert {(m["ds"], m["variant"]) for m in metrics} == {
        (d, v) for d in DAYS for v in ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed", "reference", "stream")
    }
    oracle = {v: _expected_pairs(pipeline.left, pipeline.right, demo_spec, n, True) for v, n in WINDOWED_ORACLE.items()}
    for m in metrics:
        left = oracle["batch_1d_windowed"][1]
        assert m["left_events"] == int((left.ds == m["ds"]).sum())
        if m["variant"] in oracle:
            expected, left = oracle[m["variant"]]
            day_ids = set(left[left.ds == m["ds"]].event_id)  # once a row (once per pair: the test took 25.8 s)
            matched = {p[0] for p in expected if p[1] is not None and p[0] in day_ids}
            assert m["matched_left"] == len(matched)
            assert m["match_rate"] == pytest.approx(len(matched) / m["left_events"])
            # every windowed match lies inside the window: deltas to both bounds are >= 0
            assert m["to_lower_p1"] >= 0 and m["to_upper_p1"] >= 0
            assert m["to_lower_p99"] <= demo_spec.window.span_seconds
    rows = summary_rows(metrics, "batch_1d_2d")
    assert [r["ds"] for r in rows] == DAYS
    for r in rows:
        assert r["batch_1d_2d"] >= r["batch_1d_1d"] >= r["batch_1d_windowed"]
        # the cut-off costs the windowed baseline matches, on this workload every day
        assert r["reference"] > r["batch_1d_windowed"]
        assert r["stream_minus_windowed_pp"] == pytest.approx(100 * (r["stream"] - r["batch_1d_windowed"]))
        assert r["stream_minus_baseline_pp"] == pytest.approx(100 * (r["stream"] - r["batch_1d_2d"]))
        assert r["stream_minus_reference_pp"] == pytest.approx(100 * (r["stream"] - r["reference"]))


#: The windowed variants and the right days the oracle lets them read (|right ds - left ds| <= n).
WINDOWED_ORACLE = {"batch_1d_windowed": 0, "reference": 1}


def test_hourly_match_rates_add_up_to_the_day_and_equal_the_oracle(pipeline, spark, demo_spec, test_settings):
    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    hourly = _read(spark, t.match_metrics_hourly).toPandas()
    daily = _read(spark, t.match_metrics).toPandas()
    assert set(hourly.variant) == set(daily.variant) and set(hourly.ds) == set(DAYS)
    sums = hourly.groupby(["ds", "variant"])[["left_events", "matched_left"]].sum()
    for m in daily.itertuples():
        assert tuple(sums.loc[(m.ds, m.variant)]) == (m.left_events, m.matched_left), (m.ds, m.variant)
    assert hourly.hour.between(0, 23).all()
    for variant, n in WINDOWED_ORACLE.items():
        expected, left = _expected_pairs(pipeline.left, pipeline.right, demo_spec, n, True)
        matched = {lid for lid, rid in expected if rid is not None}
        left = left.assign(hour=left["event_time"].dt.hour, matched=left["event_id"].isin(matched))  # spec zone: UTC
        want = left[left.ds.isin(DAYS)].groupby(["ds", "hour"]).agg(n=("event_id", "size"), m=("matched", "sum"))
        got = hourly[hourly.variant == variant].set_index(["ds", "hour"]).sort_index()
        assert [(int(a), int(b)) for a, b in zip(got.left_events, got.matched_left)] == [
            (int(a), int(b)) for a, b in zip(want.n, want.m)
        ], variant
        assert list(got.index) == list(want.index)


def test_the_account_adds_up_and_attribution_explains_every_match_the_stream_lacks(
    pipeline, spark, demo_spec, test_settings
):
    """For every ds and baseline: the account's terms sum exactly (in left events) to what compare
    wrote, the gains and losses are the stream's and the baseline's matched left events' set
    differences, and the cut-off gain against the windowed baseline is the stream's matches
    through right events that landed on another ds (from the landed right table)."""
    from jobs.accuracy.attribution import attribute_misses
    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    metrics = {(r.ds, r.variant): r for r in _read(spark, t.match_metrics).collect()}
    right_ds = {r.event_id: r.ds for r in _read(spark, t.landed("right")).select("event_id", "ds").collect()}
    cutoff_gains = 0
    for ds in DAYS:
        stream = _pairs(_read(spark, t.output("stream")), f"ds = '{ds}' AND right_event_id IS NOT NULL")
        s_ids = {lid for lid, _ in stream}
        for baseline in ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed", "reference"):
            att = attribute_misses(spark, demo_spec, ds, s=test_settings, baseline=baseline)
            a = att["account"]
            assert (a["ds"], a["baseline"], att["baseline"]) == (str(ds), baseline, baseline)
            stream_m, base_m = metrics[(ds, "stream")], metrics[(ds, baseline)]
            assert a["left_events"] == stream_m.left_events == base_m.left_events
            assert (a["stream_matched"], a["baseline_matched"]) == (stream_m.matched_left, base_m.matched_left)
            terms = a["cutoff_gain"] - a["left_late"] - a["right_late"] - a["other"]
            assert terms == stream_m.matched_left - base_m.matched_left, (ds, baseline, a)
            assert a["other"] == a["outside_window"] + a["not_yet_processed"] + a["unexplained"] - a["other_gain"]
            base = _pairs(_read(spark, t.output(baseline)), f"ds = '{ds}' AND right_event_id IS NOT NULL")
            b_ids = {lid for lid, _ in base}
            gained, missed = s_ids - b_ids, b_ids - s_ids
            assert a["cutoff_gain"] + a["other_gain"] == len(gained)
            assert att["missed_by_stream"] == sum(att["counts"].values()) == len(missed)
            assert a["left_late"] + a["right_late"] + a["outside_window"] + a["not_yet_processed"] + a[
                "unexplained"
            ] == len(missed)
            # gains are terms of the account, never miss causes
            assert not {"midnight_gain", "cutoff_gain", "other_gain"} & set(att["counts"])
            for ids in att["samples"].values():
                assert set(ids) <= missed
            for ids in a["samples"].values():
                assert set(ids) <= gained
            if baseline == "batch_1d_windowed":
                other_day = {lid for lid, rid in stream if right_ds.get(rid) != ds}
                assert a["cutoff_gain"] == len(gained & other_day)
                cutoff_gains += a["cutoff_gain"]
                # against the windowed baseline only lateness explains a miss: same window, all read
                assert a["outside_window"] == a["not_yet_processed"] == a["unexplained"] == 0
                assert sum(h["late_right"] + h["left_late"] for h in att["by_hour"]) == len(missed)
    assert cutoff_gains > 0, "the demo's clicks after midnight should show as cut-off gains"


def test_report_dag_gates_pass_and_the_report_shows_every_section(pipeline, spark, demo_spec, test_settings):
    import json
    from pathlib import Path

    from jobs.storage.tables import Tables

    t = Tables.of(demo_spec, test_settings)
    gates = {r.suite: r.success for r in _read(spark, t._t("quality_gates")).where(f"ds = '{DAYS[-1]}'").collect()}
    assert gates and all(gates.values()), gates
    root = Path(test_settings.path("reports", demo_spec.pipeline))
    latest = json.loads((root / "latest.json").read_text())
    assert latest["ds"] == str(DAYS[-1])
    folder = root / str(DAYS[-1])
    data = json.loads((folder / "report.json").read_text())
    for key in (
        "match_rates",
        "match_rates_hourly",
        "boundary_deltas",
        "sweep",
        "pt",
        "attribution",
        "account",
        "recommendation",
        "gates",
        "runbooks",
    ):
        assert data.get(key), f"report section {key} is empty"
    assert {r["variant"] for r in data["match_rates"]} >= {"reference", "stream"}
    assert {r["variant"] for r in data["match_rates_hourly"]} >= {"reference", "stream", "batch_1d_windowed"}
    assert "reference" in data["boundary_deltas"]
    for png in (
        "match_rate_by_day",
        "match_rate_by_hour",
        "match_rate_vs_window",
        "memory_vs_window",
        "pt_delay",
        "boundary_deltas",
        "attribution",
        "account",
    ):
        assert (folder / f"{png}.png").stat().st_size > 5000
    assert data["account"]["baseline"] == demo_spec.accuracy.baseline
    # what people read: every section of the page filled, and the day's rates as compare measured them
    import re

    from jobs.report.format import fmt_pct
    from jobs.report.render import NOT_AVAILABLE, SECTIONS

    html = (folder / "report.html").read_text()
    for sid, _ in SECTIONS:
        body = re.search(rf'<section class="card" id="{sid}">(.*?)</section>', html, re.S)
        assert body and NOT_AVAILABLE not in body.group(1), f"report section {sid} is missing or empty"
    rates = {
        r.variant: r.matched_left / r.left_events
        for r in _read(spark, t.match_metrics).where(f"ds = '{DAYS[-1]}'").collect()
    }
    match_rate = re.search(r'<section class="card" id="match-rate">(.*?)</section>', html, re.S).group(1)
    for variant in ("stream", demo_spec.accuracy.baseline, "reference"):
        assert fmt_pct(rates[variant]) in match_rate, variant
    rec = data["recommendation"]
    assert rec["lower_s"] <= 0 <= rec["upper_s"] and 0 < rec["predicted_match_rate"] <= 1
    rec_file = Path(test_settings.path("recommendations", demo_spec.pipeline)) / f"{DAYS[-1]}.json"
    assert json.loads(rec_file.read_text())["window"] == rec["window"]


def test_the_asset_events_name_the_pipeline_so_compare_gate_and_report_follow_it(demo_pipeline):
    """The asset-triggered compare, gate and report ran the default spec whatever pipeline's
    daily run triggered them: each event now names its spec, and compare's the [spec, ds] it did."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from jobs import airflow_tasks
    from jobs.spec import DEFAULT_SPEC

    with create_session() as session:
        rows = session.query(AssetModel.name, AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).all()
        events: dict[str, list] = {}
        for name, event in rows:  # the metadata DB is a copy of the project's: only this session's runs count
            if event.timestamp >= demo_pipeline.started_at:
                events.setdefault(name, []).append(event)
        batch = {"joinshift_batch_outputs": events["joinshift_batch_outputs"]}
        assert {e.extra["spec"] for e in batch["joinshift_batch_outputs"]} == {DEFAULT_SPEC}
        assert airflow_tasks.specs_of_events("", batch) == [DEFAULT_SPEC]
        metrics = {"joinshift_match_metrics": events["joinshift_match_metrics"]}
        assert airflow_tasks.runs_to_do("", None, metrics) == [[DEFAULT_SPEC, str(d)] for d in DAYS]
