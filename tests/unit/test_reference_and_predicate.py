"""The cut-off-free reference (which right days it reads, windows longer than a day), the extra
join predicate (spec validation, and batch, stream, sweep and attribution applying it alike), and the
per-hour match rates adding up to the day. Hand-built data; expected answers written out.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tiny_spec import tiny_spec

from jobs.join.conditions import join_events, join_streams, predicate_sql
from jobs.join.variants import DAILY_VARIANTS, computable_ds, right_days, window_day_offsets
from jobs.spec import SpecError

D19, D20, D21, D22, D23 = (date(2026, 11, d) for d in (19, 20, 21, 22, 23))
SCHEMA = "event_id string, k string, t timestamp, n int, _arrival_time timestamp, _partition int, _offset long, ds date"


def make_spec(**over):
    """The shared tiny spec with an int column ``n`` on both sides, for predicates."""
    return tiny_spec(extra={"n": "int"}, **over)


def with_predicate(predicate: str, **join):
    return make_spec(join={"type": "left_outer", "cardinality": "1-to-n", **join, "predicate": predicate})


def ts(hhmmss: str, day: int = 20) -> datetime:
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return datetime(2026, 11, day, h, m, s, tzinfo=UTC)


def rows(data):
    """data: (event_id, key, event 'HH:MM:SS', n[, event day, arrival day]); arrival = event + 1 s."""
    out = []
    for i, (eid, k, t, n, *rest) in enumerate(data):
        day = rest[0] if rest else 20
        arr_day = rest[1] if len(rest) > 1 else day
        h, m, s = (int(x) for x in t.split(":"))
        out.append((eid, k, ts(t, day), n, datetime(2026, 11, arr_day, h, m, min(s + 1, 59), tzinfo=UTC), 0, i))
    return [(*r, r[4].date()) for r in out]


def events(spark, data):
    return spark.createDataFrame(rows(data), SCHEMA)


def assert_pairs(df, expected):
    assertDataFrameEqual(
        df.select("left_event_id", "right_event_id"),
        [Row(left_event_id=left, right_event_id=right) for left, right in expected],
    )


# ------------------------------------------------------------------ right days of the reference


def test_window_day_offsets_floor_the_lower_and_ceil_the_upper_bound():
    assert window_day_offsets(-3 * 3600, 1800) == [-1, 0, 1]  # the demo's [-3h, +30m]
    assert window_day_offsets(0, 0) == [0]
    assert window_day_offsets(0, 3600) == [0, 1]
    assert window_day_offsets(-3600, 0) == [-1, 0]
    assert window_day_offsets(-86400, 86400) == [-1, 0, 1]  # exactly a day: one day each way
    assert window_day_offsets(-86401, 0) == [-2, -1, 0]
    assert window_day_offsets(0, 36 * 3600) == [0, 1, 2]  # longer than a day: N days
    assert window_day_offsets(-50 * 3600, -26 * 3600) == [-3, -2, -1]


def test_reference_reads_every_day_the_window_reaches_batch_1d_2d_only_the_neighbours():
    demo = make_spec(window={"lower": "-3h", "upper": "+30m"})
    assert right_days(demo, "reference", D20) == [D19, D20, D21]
    assert right_days(demo, "batch_1d_2d", D20) == [D19, D20, D21]
    long = make_spec(window={"lower": "-1h", "upper": "+50h"})  # over two days ahead
    assert right_days(long, "reference", D20) == [D19, D20, D21, D22, D23]
    assert right_days(long, "batch_1d_2d", D20) == [D19, D20, D21]  # the paper's baseline stays 1d -> 2d
    assert right_days(long, "batch_1d_windowed", D20) == [D20]
    # the daily DAG computes each variant for the left ds the landing of D23 completes
    assert [computable_ds(long, v, D23) for v in DAILY_VARIANTS] == [D23, D22, D23, D20]
    behind = make_spec(window={"lower": "-30h", "upper": "-1h"})  # only earlier days: the left ds itself
    assert right_days(behind, "reference", D20) == [date(2026, 11, 18), D19, D20]
    assert computable_ds(behind, "reference", D20) == D20


def test_the_sweeps_neighbours_read_the_references_days():
    from jobs.accuracy.sweep import right_read_days

    for zone in ("UTC", "America/Los_Angeles"):
        for lower, upper in ((-3 * 3600, 1800), (0, 36 * 3600), (-50 * 3600, 0), (0, 0), (0, 86400)):
            spec = make_spec(timezone=zone, window={"lower": f"{lower}s", "upper": f"{upper}s"})
            reads = right_read_days([D20], [(lower, upper)], "neighbours", timezone=zone)
            assert reads == right_days(spec, "reference", D20), (zone, lower, upper)


def test_across_a_23_hour_day_a_window_of_a_day_reaches_two_dates_ahead():
    """Pacific ds partitions: clocks go forward on 2026-03-08, a day of 23 hours. A search at 23:30
    on 03-07 and its click 24 hours later, at 00:30 on 03-09: the reference read 03-07 and 03-08
    only (a day taken as 24 h), so the cut-off-free ceiling missed the pair, as did the recommendation
    and the attribution's days. UTC days are all 24 h: nothing changes there."""
    from zoneinfo import ZoneInfo

    from jobs.accuracy.attribution import reach_days

    pacific = ZoneInfo("America/Los_Angeles")
    search = datetime(2026, 3, 7, 23, 30, tzinfo=pacific)
    assert (search.astimezone(UTC) + timedelta(hours=24)).astimezone(pacific).date() == date(2026, 3, 9)  # elapsed
    day = make_spec(timezone="America/Los_Angeles", window={"lower": "0s", "upper": "+24h"})
    assert right_days(day, "reference", date(2026, 3, 7)) == [date(2026, 3, 7), date(2026, 3, 8), date(2026, 3, 9)]
    assert reach_days(day, date(2026, 3, 7))[1] == date(2026, 3, 9)
    utc = make_spec(window={"lower": "0s", "upper": "+24h"})
    assert right_days(utc, "reference", date(2026, 3, 7)) == [date(2026, 3, 7), date(2026, 3, 8)]
    assert window_day_offsets(-3 * 3600, 1800, "America/Los_Angeles") == [-1, 0, 1]  # a window within a day: as in UTC


def test_a_window_longer_than_a_day_matches_across_two_midnights(spark):
    spec = make_spec(window={"lower": "0s", "upper": "+40h"})
    left = events(spark, [("L1", "a", "20:00:00", 0)])
    right_all = events(spark, [("R1", "a", "10:00:00", 0, 22), ("R2", "a", "13:00:00", 0, 22)])  # +38h, +41h
    reads = right_all.where(right_all.ds.isin(right_days(spec, "reference", D20)))
    assert_pairs(join_events(left, reads, spec, windowed=True), [("L1", "R1")])
    same_day = right_all.where(right_all.ds == D20)  # batch_1d_windowed's read: the match is out of reach
    assert_pairs(join_events(left, same_day, spec, windowed=True), [("L1", None)])


# ------------------------------------------------------------------ the predicate in the spec


@pytest.mark.parametrize(
    "predicate,message",
    [
        ("abs(l.n - r.missing) <= 1", "join.predicate: r.missing is not a column of the right stream"),
        ("l.nope > 0", "join.predicate: l.nope is not a column of the left stream"),
        ("1 = 1", "names no column; write columns as l.<column>"),
        ("l.n > 0; DROP TABLE x", "must be one boolean expression"),
        ("   ", "is empty"),
    ],
)
def test_a_bad_predicate_fails_at_spec_load_naming_the_field(predicate, message):
    with pytest.raises(SpecError) as err:
        with_predicate(predicate)
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)


def test_a_predicate_spark_cannot_parse_is_a_spec_error_naming_the_field(spark):
    from jobs.join.conditions import match_condition

    with pytest.raises(SpecError, match=r"^join.predicate: 'abs\(l.n - r.n <= 3' is not a Spark SQL expression"):
        match_condition(with_predicate("abs(l.n - r.n <= 3"))


def test_the_predicate_is_rewritten_onto_the_prefixed_columns_literals_left_alone():
    spec = with_predicate("abs(l.n - r.n) <= 10 AND r.k <> 'l.n' AND l.t < r.t")
    assert predicate_sql(spec) == "abs(`left_n` - `right_n`) <= 10 AND `right_k` <> 'l.n' AND `left_t` < `right_t`"
    assert predicate_sql(make_spec()) is None


# ------------------------------------------------------------------ batch, stream, sweep alike

LEFT = [("L1", "a", "12:00:00", 5), ("L2", "b", "12:00:00", 50), ("L3", "c", "12:00:00", 1)]
RIGHT = [
    ("R1", "a", "12:01:00", 7),  # in the window, |5 - 7| <= 3: match
    ("R2", "a", "12:02:00", 30),  # in the window, predicate false
    ("R3", "b", "12:03:00", 52),  # in the window, |50 - 52| <= 3: match
    ("R4", "b", "13:00:00", 50),  # predicate true, outside the window
    ("R5", "c", "12:00:00", 9),  # in the window, predicate false: L3 unmatched
]
PREDICATE = "abs(l.n - r.n) <= 3"


def test_batch_applies_the_predicate_in_windowed_and_key_only_variants(spark):
    spec = with_predicate(PREDICATE)
    left, right = events(spark, LEFT), events(spark, RIGHT)
    assert_pairs(join_events(left, right, spec, windowed=True), [("L1", "R1"), ("L2", "R3"), ("L3", None)])
    # key-only baselines: the predicate is part of the join, only the window is left out
    assert_pairs(
        join_events(left, right, spec, windowed=False), [("L1", "R1"), ("L2", "R3"), ("L2", "R4"), ("L3", None)]
    )
    inner = with_predicate(PREDICATE, type="inner")
    assert_pairs(join_events(left, right, inner, windowed=True), [("L1", "R1"), ("L2", "R3")])


def test_stream_applies_the_predicate_like_batch_on_a_real_stream(spark, tmp_path):
    spec = with_predicate(PREDICATE)
    batch = join_events(events(spark, LEFT), events(spark, RIGHT), spec, windowed=True)
    for side, data in (("left", LEFT), ("right", RIGHT)):
        (tmp_path / side).mkdir()
        lines = [
            json.dumps(
                dict(zip(("event_id", "k", "t", "n", "_arrival_time", "_partition", "_offset", "ds"), r)),
                default=lambda v: v.isoformat(),  # ISO-8601 timestamps and dates, as Spark's JSON reader parses them
            )
            for r in rows(data)
        ]
        (tmp_path / side / "0.json").write_text("\n".join(lines) + "\n")
    left, right = (spark.readStream.schema(SCHEMA).json(str(tmp_path / side)) for side in ("left", "right"))
    query = join_streams(left, right, spec).writeStream.format("memory").queryName("predicate_stream").start()
    try:
        query.processAllAvailable()
        streamed = spark.table("predicate_stream")
        # matched pairs at once; L3's null row waits for a watermark past its window, which never comes here
        assert_pairs(streamed, [("L1", "R1"), ("L2", "R3")])
        assert_pairs(batch.where("right_event_id IS NOT NULL"), [("L1", "R1"), ("L2", "R3")])
    finally:
        query.stop()


def test_sweep_agrees_with_join_events_under_a_predicate(spark):
    from jobs.accuracy.sweep import sweep

    spec = with_predicate(PREDICATE)
    left, right = events(spark, LEFT), events(spark, RIGHT)
    candidates = [(-600, 300), (-600, 3600), (0, 120)]
    got = sweep(left, right, spec, candidates)
    for r in got.itertuples():
        cand = spec.with_window(timedelta(seconds=r.lower_s), timedelta(seconds=r.upper_s))
        out = join_events(left, right, cand, windowed=True).where("right_event_id IS NOT NULL")
        assert r.matched_left == out.select("left_event_id").distinct().count(), (r.lower_s, r.upper_s)
        assert r.pairs == out.count()
    assert list(got.matched_left) == [2, 2, 1]  # [-10m, +5m]: L1, L2; [-10m, +1h]: L1, L2; [0, +2m]: L1


def test_attribution_applies_the_predicate_when_it_names_a_miss_cause(spark):
    """L1's one partner the predicate admits (R1) came behind the right watermark; R2, in the window
    but failing the predicate, was read on time. Only with the predicate applied is L1 a late-right
    loss (without it R2 would make it unexplained)."""
    from pyspark.sql import functions as F

    from jobs.accuracy.attribution import classify_misses

    spec = with_predicate(PREDICATE)
    missed = events(spark, LEFT[:2]).withColumn("_dropped_late", F.lit(False)).withColumn("_batch_id", F.lit(2))
    right = (
        events(spark, RIGHT)
        .withColumn("_batch_id", F.lit(3).cast("long"))
        .withColumn("_dropped_late", F.col("event_id") == "R1")
    )
    causes = {r.event_id: r.cause for r in classify_misses(spec, missed, right).collect()}
    assert causes == {"L1": "late_right", "L2": "other"}  # L2's partner R3 was read on time: unexplained
    no_predicate = make_spec()
    causes = {r.event_id: r.cause for r in classify_misses(no_predicate, missed, right).collect()}
    assert causes["L1"] == "other"


# ------------------------------------------------------------------ per hour adds up to the day


def test_hourly_match_rates_sum_to_the_day_and_use_the_specs_time_zone(spark):
    from jobs.accuracy.compare import ds_metrics, matched_pairs

    spec = make_spec(timezone="America/Los_Angeles")  # UTC-8 in November
    left = events(
        spark,
        [
            ("L1", "a", "12:00:00", 0),
            ("L2", "b", "12:30:00", 0),
            ("L3", "c", "13:10:00", 0),
            ("L4", "d", "07:59:00", 0),
        ],
    )
    right = events(spark, [("R1", "a", "12:01:00", 0), ("R3", "c", "13:12:00", 0), ("R3b", "c", "13:13:00", 0)])
    out = join_events(left, right, spec, windowed=True)
    daily, hourly = ds_metrics(left, matched_pairs({"stream": out}, spec), ["stream"], spec)
    hourly = {(r.hour, r.left_events, r.matched_left) for r in hourly.collect()}
    # 12:00Z / 12:30Z are 04:xx in Los Angeles, 13:10Z is 05:10, 07:59Z is 23:59 of the day before
    assert hourly == {(4, 2, 1), (5, 1, 1), (23, 1, 0)}
    day = daily.first()
    assert (day.left_events, day.matched_left) == (sum(h[1] for h in hourly), sum(h[2] for h in hourly))


def test_with_a_batch_table_of_its_own_each_variant_is_rated_over_the_left_events_it_joined(spark):
    """The batch job's own table may hold other left events than landed from Kafka: the stream's
    rate is over what it read (the landed events), the batch variants' over the table, so a stream
    that matched all it read is at 100 % whatever the table holds."""
    from jobs.accuracy.compare import ds_metrics, matched_pairs

    spec = make_spec()
    landed = events(spark, [("L1", "a", "12:00:00", 0), ("L2", "b", "12:30:00", 0)])
    own_table = events(spark, [("L1", "a", "12:00:00", 0), ("L2", "b", "12:30:00", 0), ("L9", "z", "13:00:00", 0)])
    right = events(spark, [("R1", "a", "12:01:00", 0), ("R2", "b", "12:31:00", 0)])
    outputs = {
        "stream": join_events(landed, right, spec, windowed=True),
        "reference": join_events(own_table, right, spec, windowed=True),
    }
    pairs = matched_pairs(outputs, spec)
    daily, hourly = ds_metrics(own_table, pairs, list(outputs), spec, landed)
    rows = {r.variant: (r.left_events, r.matched_left) for r in daily.collect()}
    assert rows == {"stream": (2, 2), "reference": (3, 2)}
    per_hour = {(r.variant, r.hour): r.left_events for r in hourly.collect()}
    assert per_hour == {("stream", 12): 2, ("reference", 12): 2, ("reference", 13): 1}
    daily, _ = ds_metrics(own_table, pairs, list(outputs), spec)  # nothing landed: the table for every variant
    assert {r.variant: r.left_events for r in daily.collect()} == {"stream": 3, "reference": 3}


def test_compare_shows_the_streams_gap_to_its_baseline_and_to_the_reference():
    from rich.console import Console

    from jobs.accuracy.compare import render_hourly_table, render_table, summary_rows

    def m(variant, rate):
        return {"ds": D20, "variant": variant, "match_rate": rate, "to_lower_p99": 60.0, "to_upper_p99": 30.0}

    metrics = [m("batch_1d_2d", 0.95), m("batch_1d_windowed", 0.90), m("reference", 0.93), m("stream", 0.92)]
    (row,) = summary_rows(metrics, "batch_1d_2d")
    assert row["stream_minus_baseline_pp"] == pytest.approx(-3.0)
    assert row["stream_minus_reference_pp"] == pytest.approx(-1.0)
    assert row["stream_minus_windowed_pp"] == pytest.approx(2.0)
    console = Console(width=250, record=True)
    console.print(render_table(metrics, "batch_1d_2d"))
    text = console.export_text()
    assert "stream − batch_1d_2d (the spec's baseline) and stream − reference" in text and "93.00%" in text
    assert "-3.00" in text and "-1.00" in text
    hourly = [
        {"ds": D20, "hour": 7, "variant": v, "left_events": 40, "matched_left": k, "match_rate": k / 40}
        for v, k in (("stream", 30), ("reference", 36))
    ]
    console.print(render_hourly_table(hourly))
    line = next(ln for ln in console.export_text().splitlines() if " 07 " in ln)
    assert "40" in line and "75.00%" in line and "90.00%" in line
