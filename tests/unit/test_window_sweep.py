"""One-pass window sweep: hand-checked answers, the grid parser, and a property test against
running ``join_events(..., windowed=True)`` once per candidate window."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from tiny_spec import tiny_spec

from jobs.accuracy.grid import GridError, candidate_grid, parse_grid
from jobs.accuracy.sweep import METHODS, RESULT_COLUMNS, right_read_days, sweep, sweep_ds
from jobs.join.conditions import join_events

H, M = 3600, 60
D20, D21, D22 = date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 22)


SCHEMA = "event_id string, k string, t timestamp, _arrival_time timestamp, _partition int, _offset long, ds date"


def ts(hhmmss: str, day: int = 20) -> datetime:
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return datetime(2026, 11, day, h, m, s, tzinfo=UTC)


def events(spark, rows):
    """rows: (event_id, key, event 'HH:MM:SS', arrival 'HH:MM:SS'[, day, arrival_day])"""
    out = []
    for i, (eid, k, t, arr, *rest) in enumerate(rows):
        day = rest[0] if len(rest) > 0 else 20
        arr_day = rest[1] if len(rest) > 1 else day
        out.append((eid, k, ts(t, day), ts(arr, arr_day), 0, i, date(2026, 11, arr_day)))
    return spark.createDataFrame(out, SCHEMA)


def as_dict(result):
    """(ds, lower, upper) -> (left_events, matched_left, pairs)."""
    return {(r.ds, r.lower_s, r.upper_s): (r.left_events, r.matched_left, r.pairs) for r in result.itertuples()}


# --------------------------------------------------------------------------- hand-built answers


def test_matches_need_an_offset_inside_the_window_not_just_min_and_max(spark):
    spec = tiny_spec()
    left = events(
        spark,
        [
            ("L1", "a", "12:00:00", "12:00:01"),  # rights at −5h and +5h only
            ("L2", "b", "12:00:00", "12:00:01"),  # right exactly at +30m
            ("L3", "c", "12:00:00", "12:00:01"),  # rights exactly at −3h and one second before
            ("L4", "z", "12:00:00", "12:00:01"),  # no right event at all
        ],
    )
    right = events(
        spark,
        [
            ("R1", "a", "07:00:00", "12:00:05"),
            ("R2", "a", "17:00:00", "17:00:05"),
            ("R3", "b", "12:30:00", "12:30:05"),
            ("R4", "c", "09:00:00", "12:00:05"),
            ("R5", "c", "08:59:59", "12:00:05"),
            ("R6", "y", "12:00:00", "12:00:05"),  # a key no left event has
        ],
    )
    cands = [
        (-6 * H, 6 * H),
        (-H, H),
        (-3 * H, 30 * M),
        (-3 * H, 0),
        (0, 30 * M),
        (-5 * H, -5 * H),
        (-3 * H + 1, 30 * M - 1),
    ]
    got = sweep(left, right, spec, cands)
    assert list(got.columns) == list(RESULT_COLUMNS)
    assert as_dict(got) == {
        (D20, -6 * H, 6 * H): (4, 3, 5),  # L1 (2 pairs), L2 (1), L3 (2)
        (D20, -H, H): (4, 1, 1),  # only L2: L1's ±5h are both outside
        (D20, -3 * H, 30 * M): (4, 2, 2),  # bounds inclusive: L2 at +30m, L3 at −3h (not −3h−1s)
        (D20, -3 * H, 0): (4, 1, 1),  # L3
        (D20, 0, 30 * M): (4, 1, 1),  # L2
        (D20, -5 * H, -5 * H): (4, 1, 1),  # a zero-width window hits L1's −5h exactly
        (D20, -3 * H + 1, 30 * M - 1): (4, 0, 0),  # one second inside each bound: nothing
    }
    row = got[(got.lower_s == -3 * H) & (got.upper_s == 30 * M)].iloc[0]
    assert row.match_rate == 0.5


def test_sub_second_offsets_are_exact_at_the_bounds(spark):
    spec = tiny_spec()
    t0 = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
    left = spark.createDataFrame([("L1", "a", t0, t0, 0, 0, D20)], SCHEMA)
    right = spark.createDataFrame(
        [
            ("R1", "a", t0 + timedelta(minutes=30, microseconds=1), t0 + timedelta(hours=1), 0, 1, D20),
        ],
        SCHEMA,
    )
    got = as_dict(sweep(left, right, spec, [(0, 30 * M), (0, 30 * M + 1)]))
    assert got == {(D20, 0, 30 * M): (1, 0, 0), (D20, 0, 30 * M + 1): (1, 1, 1)}


def test_several_lefts_on_one_key_are_decided_one_by_one(spark):
    spec = tiny_spec()
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01"), ("L2", "a", "14:00:00", "14:00:01")])
    right = events(spark, [("R1", "a", "12:10:00", "12:20:00")])  # L1: +10m, L2: −1h50m
    got = as_dict(sweep(left, right, spec, [(-2 * H, 0), (0, H), (-2 * H, H), (-H, 0)]))
    assert got == {
        (D20, -2 * H, 0): (2, 1, 1),
        (D20, 0, H): (2, 1, 1),
        (D20, -2 * H, H): (2, 2, 2),
        (D20, -H, 0): (2, 0, 0),
    }


def test_right_events_at_one_time_count_one_match_and_every_pair(spark):
    """Two right events at the same instant on a key: the histogram's previous pair of the second
    is the first (offset equal, not below), so the left event is matched once, paired twice."""
    spec = tiny_spec()
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01")])
    right = events(
        spark,
        [("R1", "a", "12:10:00", "12:20:00"), ("R2", "a", "12:10:00", "12:20:00"), ("R3", "a", "11:50:00", "12:20:00")],
    )
    cands = [(0, H), (-H, 0), (-H, H), (10 * M, 10 * M), (-H, -30 * M)]
    want = {
        (D20, 0, H): (1, 1, 2),
        (D20, -H, 0): (1, 1, 1),
        (D20, -H, H): (1, 1, 3),
        (D20, 10 * M, 10 * M): (1, 1, 2),
        (D20, -H, -30 * M): (1, 0, 0),
    }
    for method in METHODS:
        assert as_dict(sweep(left, right, spec, cands, method=method)) == want, method


def test_neighbours_previous_pair_is_one_read_for_the_same_left_ds(spark):
    """R1 lies just before R2 on the key but landed in ds 22, which a left event of ds 20 does not
    read under ``neighbours``: for L1, R2 has no previous pair, so L1 matches."""
    spec = tiny_spec()
    left = events(spark, [("L1", "a", "23:30:00", "23:30:05", 20, 20)])
    right = events(
        spark,
        [("R1", "a", "23:20:00", "00:05:00", 20, 22), ("R2", "a", "23:40:00", "23:45:00", 20, 20)],
    )
    for method in METHODS:
        got = as_dict(sweep(left, right, spec, [(-H, H), (0, H)], right_days="neighbours", method=method))
        assert got == {(D20, -H, H): (1, 1, 1), (D20, 0, H): (1, 1, 1)}, method
        got = as_dict(sweep(left, right, spec, [(-H, H), (0, H)], right_days="all", method=method))
        assert got == {(D20, -H, H): (1, 1, 2), (D20, 0, H): (1, 1, 1)}, method


def test_right_days_same_neighbours_and_all_across_midnight(spark):
    spec = tiny_spec()
    left = events(
        spark,
        [
            ("L1", "a", "23:50:00", "23:50:05", 20, 20),  # ds 20
            ("L2", "b", "00:30:00", "00:30:05", 21, 21),  # ds 21
        ],
    )
    right = events(
        spark,
        [
            ("R1", "a", "23:55:00", "00:10:00", 20, 21),  # L1 +5m, but lands in ds 21
            ("R2", "b", "23:58:00", "23:59:00", 20, 20),  # L2 −32m, landed in ds 20
        ],
    )
    c = [(-H, H), (0, H)]
    same = as_dict(sweep(left, right, spec, c, right_days="same"))
    assert same == {(D20, -H, H): (1, 0, 0), (D20, 0, H): (1, 0, 0), (D21, -H, H): (1, 0, 0), (D21, 0, H): (1, 0, 0)}
    for mode in ("neighbours", "all"):
        assert as_dict(sweep(left, right, spec, c, right_days=mode)) == {
            (D20, -H, H): (1, 1, 1),
            (D20, 0, H): (1, 1, 1),
            (D21, -H, H): (1, 1, 1),
            (D21, 0, H): (1, 0, 0),
        }
    # neighbours reads ds−1 only when the widest window reaches back: here it does not
    assert as_dict(sweep(left, right, spec, [(0, H)], right_days="neighbours"))[(D20, 0, H)] == (1, 1, 1)
    assert right_read_days([D21], [(0, H)], "neighbours", timezone="UTC") == [D21, D22]
    assert right_read_days([D21], [(-H, 0)], "neighbours", timezone="UTC") == [D20, D21]
    assert right_read_days([D20, D21], [(-H, H)], "neighbours", timezone="UTC") == [date(2026, 11, 19), D20, D21, D22]
    assert right_read_days([D20, D21], [(-H, H)], "same", timezone="UTC") == [D20, D21]


def test_bit_ranges():
    from jobs.accuracy.sweep import _bits

    assert _bits(0, 0) == 1 and _bits(2, 4) == 0b11100 and _bits(0, 62) == 2**63 - 1


def test_cell_lookup_and_case_search_agree_with_bisect(spark):
    import bisect

    from jobs.accuracy.sweep import _US, _cell_of, _cell_tree

    points = [-2 * H, -30 * M, 0, 10 * M, H]  # gcd 10 min: lines that are not points too
    ds_ = sorted(
        ({p * _US + e for p in points for e in (-1, 0, 1)} | {-H * _US, 25 * M * _US, 1})
        - {-2 * H * _US - 1, H * _US + 1}
    )  # offsets inside [first, last] point

    def expected(d):
        k = bisect.bisect_right([p * _US for p in points], d) - 1
        return 2 * k if d == points[k] * _US else 2 * k + 1

    df = spark.createDataFrame([(d,) for d in ds_], "d long")
    got = df.select(
        "d",
        _cell_of(F.col("d"), points).alias("a"),
        _cell_tree(F.col("d"), [p * _US for p in points], 0, len(points) - 1).alias("b"),
    )
    assertDataFrameEqual(got, [Row(d=d, a=expected(d), b=expected(d)) for d in ds_], checkRowOrder=True)


def test_no_left_events_gives_no_rows_and_bad_candidates_are_refused(spark):
    spec = tiny_spec()
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01")]).limit(0)
    right = events(spark, [("R1", "a", "12:00:00", "12:00:01")])
    got = sweep(left, right, spec, [(0, H)])
    assert got.empty and list(got.columns) == list(RESULT_COLUMNS)
    with pytest.raises(GridError, match="no candidate"):
        sweep(left, right, spec, [])
    with pytest.raises(GridError, match=r"lower is after upper"):
        sweep(left, right, spec, [(H, 0)])
    with pytest.raises(ValueError, match="right_days"):
        sweep(left, right, spec, [(0, H)], right_days="both")


# --------------------------------------------------------------------------- the grid


def test_candidate_grid_and_compact_form():
    g = parse_grid("lower=-6h..0h/30m,upper=0..6h/30m")
    assert len(g) == 169 and g[0] == (-6 * H, 0) and g[-1] == (0, 6 * H)
    assert (-3 * H, 30 * M) in g
    assert g == candidate_grid(range(-6 * H, 1, 30 * M), range(0, 6 * H + 1, 30 * M))
    assert parse_grid("lower=-4h30m..0/30m, upper=0..2h/30m") == candidate_grid(
        range(-270 * M, 1, 30 * M), range(0, 2 * H + 1, 30 * M)
    )
    assert len(parse_grid("lower=-4h30m..0/30m,upper=0..2h/30m")) == 50
    assert parse_grid("lower=-3h|-1h,upper=+30m") == [(-3 * H, 30 * M), (-H, 30 * M)]
    assert parse_grid("lower=-1h..-1h,upper=0") == [(-H, 0)]
    # pairs with lower > upper are not windows: skipped
    assert candidate_grid(["-1h", "30m"], [timedelta(minutes=30), 0]) == [(-H, 0), (-H, 30 * M), (30 * M, 30 * M)]


@pytest.mark.parametrize(
    "text, names",
    [
        ("lower=-6h..0x/30m,upper=0..6h/30m", ["lower=-6h..0x/30m", "'0x' is not a duration"]),
        ("lower=-6h..0h/30m", ["missing upper"]),
        ("lowr=-6h..0h/30m,upper=0", ["'lowr=-6h..0h/30m'", "lower=<values>"]),
        ("lower=-6h..0h,upper=0", ["'lower=-6h..0h'", "needs a step"]),
        ("lower=0..-6h/30m,upper=0", ["runs backwards"]),
        ("lower=-6h..0h/7m,upper=0", ["'lower=-6h..0h/7m'", "does not divide"]),
        ("lower=-6h..0h/-30m,upper=0", ["must be positive"]),
        ("lower=-1h,upper=0,upper=1h", ["'upper=1h'", "given twice"]),
        ("lower=-1500ms,upper=0", ["whole number of seconds"]),
        ("lower=1h,upper=0", ["no candidate has lower <= upper"]),
        ("lower=-1h,,upper=0", ["empty part"]),
        ("lower=-1h|,upper=0", ["empty value"]),
        # a step typed too fine: refused before its bound points fill the memory (it was an OOM kill)
        ("lower=-9999d..0/1s,upper=0..6h/30m", ["863,913,601 bound points", "at most 100,000", "coarser step"]),
        ("lower=-1d..0/1m,upper=0..1d/1m", ["1,441 lower x 1,441 upper", "at most 100,000"]),
    ],
)
def test_grid_errors_name_the_bad_part(text, names):
    with pytest.raises(GridError) as exc:
        parse_grid(text)
    for n in names:
        assert n in str(exc.value), str(exc.value)


# --------------------------------------------------------------------------- property test


def random_events(spark, seed, n_left=300, n_right=450):
    """Random left/right events over two days, small key space (many pairs, hot keys), some
    right offsets exactly on candidate bounds, sub-second times, arrivals crossing midnight."""
    rng = np.random.default_rng(seed)
    base = datetime(2026, 11, 20, tzinfo=UTC)
    keys = [f"k{i}" for i in range(25)]
    left_rows, right_rows = [], []
    l_times = []
    for i in range(n_left):
        t = base + timedelta(seconds=int(rng.integers(0, 2 * 86400)), microseconds=int(rng.integers(0, 2)) * 500_000)
        arr = t + timedelta(seconds=int(rng.integers(1, 1800)))
        k = keys[int(rng.zipf(1.5) - 1) % len(keys)]
        left_rows.append((f"L{i}", k, t, arr, 0, i, arr.date()))
        l_times.append((k, t))
    exact = [-6 * H, -3 * H, -H, -30 * M, 0, 30 * M, H, 2 * H, 6 * H]
    for j in range(n_right):
        k, lt = l_times[int(rng.integers(0, n_left))]
        u = rng.random()
        if u < 0.2:
            off = timedelta(seconds=exact[int(rng.integers(0, len(exact)))] + int(rng.integers(-1, 2)))
        else:
            off = timedelta(seconds=int(rng.integers(-7 * H, 7 * H)), microseconds=int(rng.integers(0, 1_000_000)))
        if rng.random() < 0.1:
            k = keys[int(rng.integers(0, len(keys)))]  # some rights pair with whoever is on the key
        t = lt + off
        arr = t + timedelta(seconds=int(rng.integers(1, 3 * H)))
        right_rows.append((f"R{j}", k, t, arr, 0, j, arr.date()))
    return spark.createDataFrame(left_rows, SCHEMA), spark.createDataFrame(right_rows, SCHEMA)


def expected_by_join_events(left, right, spec, cands, right_days):
    """Run the windowed batch join once per candidate (and per left ds where the mode needs it),
    in one Spark job, then count matched left events and pairs per ds the way compare does."""
    left_ds = sorted(r.ds for r in left.select("ds").distinct().collect())
    frames = []
    for a, b in cands:
        s = spec.with_window(timedelta(seconds=a), timedelta(seconds=b))
        if right_days == "all":
            parts = [(left, right)]
        else:
            offs = [0] if right_days == "same" else [-1, 0, 1]
            lo, hi = min(x for x, _ in cands), max(y for _, y in cands)
            offs = [o for o in offs if o == 0 or (o < 0 and lo < 0) or (o > 0 and hi > 0)]
            parts = [
                (left.where(F.col("ds") == d), right.where(F.col("ds").isin([d + timedelta(days=o) for o in offs])))
                for d in left_ds
            ]
        for lp, rp in parts:
            out = join_events(lp, rp, s, windowed=True)
            frames.append(out.select("ds", "left_event_id", "right_event_id", F.lit(a).alias("a"), F.lit(b).alias("b")))
    u = frames[0]
    for f in frames[1:]:
        u = u.unionByName(f)
    pdf = u.toPandas()
    totals = left.groupBy("ds").count().toPandas().set_index("ds")["count"].to_dict()
    exp = {}
    for (ds, a, b), g in pdf.groupby(["ds", "a", "b"]):
        m = g[g.right_event_id.notna()]
        exp[(ds, int(a), int(b))] = (totals[ds], m.left_event_id.nunique(), len(m))
    return exp


HOURLY = (
    "lower=-6h..0/1h,upper=0..6h/1h",  # 49 candidates, 13 bound points: one 63-bit mask
    [(-6 * H, 6 * H), (-3 * H, 0), (-H, H), (0, 0), (-2 * H, 3 * H), (-5 * H, H), (0, 6 * H)],
)
FINE = (
    "lower=-6h..0/10m,upper=0|30m|1h|6h",  # 148 candidates, 40 points = 79 cells: two masks
    [(-6 * H, 6 * H), (-H, 0), (-30 * M, 30 * M), (-3 * H, H), (-50 * M, 0), (-40 * M, 30 * M), (0, 0)],
)


ODD = (
    "lower=-6h..0/1h|-1s,upper=0|1s|30m|6h",  # gcd 1 s over 12 h: too many grid lines for the
    [(-6 * H, 6 * H), (-1, 1), (-1, 0), (0, 1), (-H, 30 * M), (-1, 6 * H)],
)  # lookup: CASE search


#: a predicate on right columns only: the histogram filters the right events before their lag
RIGHT_ONLY = "r.event_id NOT LIKE '%3'"


@pytest.mark.parametrize(
    "seed, right_days, grid, predicate",
    [
        (1, "all", HOURLY, None),
        (2, "same", HOURLY, None),
        (3, "neighbours", HOURLY, None),
        (4, "all", FINE, None),
        (5, "same", ODD, None),
        (6, "neighbours", FINE, RIGHT_ONLY),
    ],
)
def test_sweep_equals_one_windowed_join_per_candidate(spark, seed, right_days, grid, predicate):
    """Both methods, each from one pass, equal one join per candidate (random data with hot keys,
    right events at equal times on a key, offsets on the bounds, arrivals across midnight)."""
    spec = tiny_spec(
        **({"join": {"type": "left_outer", "cardinality": "1-to-n", "predicate": predicate}} if predicate else {})
    )
    left, right = random_events(spark, seed)
    left, right = left.cache(), right.cache()
    try:
        text, checked = grid
        cands = parse_grid(text)
        exp = expected_by_join_events(left, right, spec, checked, right_days)
        assert exp  # the data has pairs
        assert any(v[1] for v in exp.values()) and any(v[1] < v[0] for v in exp.values())
        results = {m: sweep(left, right, spec, cands, right_days=right_days, method=m) for m in METHODS}
        for method, got in results.items():
            assert len(got) == len(cands) * got.ds.nunique(), method
            got_d = as_dict(got)
            assert {k: got_d[k] for k in exp} == exp, method
            # the rates are the counts' ratio, and widening never loses a match
            assert all(math.isclose(r.match_rate, r.matched_left / r.left_events) for r in got.itertuples())
            for (ds, a, b), (_, m, p) in got_d.items():
                if (ds, a - H, b) in got_d:
                    assert got_d[(ds, a - H, b)][1] >= m and got_d[(ds, a - H, b)][2] >= p
        assertDataFrameEqual(results["histogram"], results["cell-sets"])  # every candidate, not just the checked
    finally:
        left.unpersist()
        right.unpersist()


# --------------------------------------------------------------------------- I/O shell


def test_sweep_ds_reads_landed_tables_and_checks_right_partitions(spark, test_settings):
    from jobs.steps.batch import PartitionsNotLanded
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    spec = tiny_spec(pipeline="sweep_io")
    tables = Tables.of(spec, test_settings)
    left = events(spark, [("L1", "a", "23:50:00", "23:50:05", 20, 20), ("L2", "q", "12:00:00", "12:00:01", 20, 20)])
    right = events(spark, [("R1", "a", "23:55:00", "00:10:00", 20, 21), ("R0", "q", "11:00:00", "11:01:00", 20, 20)])
    delta_io.replace_partitions(left, tables.landed("left"), {"ds": [D20]})
    delta_io.replace_partitions(right, tables.landed("right"), {"ds": [D20, D21]})

    def log(days):
        rows = [("right", "right", d, 1, 1, 0, datetime.now(UTC)) for d in days]
        spark.createDataFrame(
            rows,
            "side string, stream string, ds date, records long, landed long, quarantined long, landed_at timestamp",
        ).write.format("delta").mode("overwrite").save(tables.landing_log)

    log([date(2026, 11, 19), D20, D21])
    cands = [(-H, H), (0, 30 * M)]
    same = sweep_ds(spark, spec, [D20, D21], cands, test_settings)
    assert as_dict(same) == {
        (D20, -H, H): (2, 1, 1),
        (D20, 0, 30 * M): (2, 0, 0),  # L2 at −1h; R1 is in ds 21
        (D21, -H, H): (0, 0, 0),
        (D21, 0, 30 * M): (0, 0, 0),
    }  # no left events that day
    assert same[same.ds == D21].match_rate.isna().all()
    with pytest.raises(PartitionsNotLanded, match="waits for right-stream ds 2026-11-22, which has not landed"):
        sweep_ds(spark, spec, [D21], cands, test_settings, right_days="neighbours")  # reads ds 20..22
    nb = sweep_ds(spark, spec, [D20], cands, test_settings, right_days="neighbours")  # reads ds 19..21
    assert as_dict(nb) == {(D20, -H, H): (2, 2, 2), (D20, 0, 30 * M): (2, 1, 1)}
