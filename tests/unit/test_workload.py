"""The workload generator: deterministic, realistic, and every bad record bad for its stated reason.

Pure and fast: no Spark, no Kafka. A reference classifier (plain Python, the landing contract's
rules) re-derives the quarantine reason of every generated record from its bytes alone.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.spec import JoinSpec, SpecError, UnknownFields, load_spec
from jobs.workload.generator import RECORD_COLUMNS, generate
from jobs.workload.params import BAD_CLASSES, WorkloadParams, load_workload, parse_workload
from jobs.workload.publisher import iter_slices
from jobs.workload.texts import iso_ms

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILE = ROOT / "include" / "specs" / "search_sessions.yaml"
WORKLOAD_FILE = ROOT / "include" / "workloads" / "search_sessions.yaml"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture(scope="module")
def spec() -> JoinSpec:
    return load_spec(SPEC_FILE)


@pytest.fixture(scope="module")
def params() -> WorkloadParams:
    return load_workload(WORKLOAD_FILE)


@pytest.fixture(scope="module")
def wl(params, demo_spec):
    return generate(params, demo_spec)


# ------------------------------------------------------------------ a reference classifier


def _parse_time(v) -> datetime | None:
    if not isinstance(v, str) or not ISO.match(v):
        return None
    try:
        return datetime.strptime(v, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _type_ok(v, typ: str) -> bool:
    if typ == "string":
        return isinstance(v, str)
    if typ in ("int", "long"):
        return isinstance(v, int) and not isinstance(v, bool)
    if typ == "double":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if typ == "boolean":
        return isinstance(v, bool)
    if typ == "timestamp":
        return _parse_time(v) is not None
    raise AssertionError(typ)


def classify(records: pd.DataFrame, spec: JoinSpec) -> list[str | None]:
    """The quarantine reason of every record (records in arrival order), from its bytes alone."""
    by_topic = {spec.left.topic: spec.left, spec.right.topic: spec.right}
    max_past, max_future = spec.timestamp_validity.max_past, spec.timestamp_validity.max_future
    seen: dict[str, set] = {t: set() for t in by_topic}
    out: list[str | None] = []
    for topic, value, arrival_ms in zip(records["topic"], records["value"], records["arrival_ms"]):
        stream = by_topic[topic]
        arrival = datetime.fromtimestamp(arrival_ms / 1000, UTC)
        reason = None
        try:
            obj = json.loads(value)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            reason = "malformed_json"
        elif obj.get(stream.id) is None:
            reason = "null_id"
        elif any(obj.get(k) is None for k in stream.key):
            reason = "null_key"
        elif _parse_time(obj.get(stream.event_time)) is None:
            reason = "bad_event_time"
        elif any(
            obj.get(c) is not None and not _type_ok(obj[c], t)
            for c, t in stream.schema_.items()
            if c not in (stream.id, stream.event_time, *stream.key)
        ):
            reason = "bad_type"
        elif set(obj) - set(stream.schema_) and spec.unknown_fields == UnknownFields.quarantine:
            reason = "unexpected_field"
        else:
            et = _parse_time(obj[stream.event_time])
            if et < arrival - max_past:
                reason = "event_time_too_old"
            elif et > arrival + max_future:
                reason = "event_time_in_future"
            elif obj[stream.id] in seen[topic]:
                reason = "duplicate_event_id"
            else:
                seen[topic].add(obj[stream.id])
        out.append(reason)
    return out


# ------------------------------------------------------------------ parameters and the YAML file


def test_the_workload_file_documents_the_defaults(params):
    assert params == WorkloadParams()
    assert params.start_date.isoformat() == "2026-11-19" and params.days == 2


def test_a_bad_field_in_the_file_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORKLOAD_FILE.read_text().replace("unmatched_share: 0.08", "unmatched_share: 1.5"))
    with pytest.raises(SpecError, match=r"unmatched_share: .*less than or equal to 1"):
        load_workload(bad)

    bad.write_text("left_events_per_dya: 100\nbad:\n  null_keys: 0.1\n")
    with pytest.raises(SpecError) as e:
        load_workload(bad)
    msg = str(e.value)
    assert "left_events_per_dya: unknown field (did you mean left_events_per_day?); allowed: seed, start_date" in msg
    assert "bad.null_keys: unknown field (did you mean null_key?); allowed: malformed_json, null_key" in msg

    # many unknown fields (a spec given as a workload): each parent's allowed list said once, not per field
    bad.write_text((Path(__file__).parents[2] / "include/specs/search_sessions.yaml").read_text())
    with pytest.raises(SpecError) as e:
        load_workload(bad)
    msg = str(e.value)
    assert msg.count("allowed:") == 1 and "(top level): unknown fields pipeline, timezone, left, right" in msg

    with pytest.raises(SpecError, match="right_late_mean: .*not a duration"):
        parse_workload({"right_late_mean": "forty minutes"})
    with pytest.raises(SpecError, match="distinct_keys_per_day: must not exceed left_events_per_day"):
        parse_workload({"left_events_per_day": 10, "distinct_keys_per_day": 11})
    with pytest.raises(SpecError, match="bad shares sum to"):
        parse_workload({"bad": {c: 0.1 for c in BAD_CLASSES}})
    with pytest.raises(SpecError, match="does not exist"):
        load_workload(tmp_path / "missing.yaml")
    assert parse_workload(None) == WorkloadParams()


# ------------------------------------------------------------------ records


def test_records_shape_and_arrival_order(wl, demo_spec):
    r = wl.records
    assert list(r.columns) == list(RECORD_COLUMNS)
    assert r["arrival_ms"].dtype == np.int64
    assert r["arrival_ms"].is_monotonic_increasing
    assert set(r["side"]) == {"left", "right"}
    assert (r.loc[r.side == "left", "topic"] == demo_spec.left.topic).all()
    assert (r.loc[r.side == "right", "topic"] == demo_spec.right.topic).all()
    # nothing arrives before the first day (the demo lands start_date .. last day + 1)
    first = pd.Timestamp("2026-11-19", tz=demo_spec.timezone)
    assert r["arrival_ms"].min() >= first.value // 10**6


def test_deterministic(params, demo_spec, wl):
    again = generate(params, demo_spec)
    pd.testing.assert_frame_equal(again.records, wl.records)
    pd.testing.assert_frame_equal(again.left, wl.left)
    pd.testing.assert_frame_equal(again.links, wl.links)
    other = generate(params.model_copy(update={"seed": params.seed + 1}), demo_spec)
    assert not other.records["value"].head(100).equals(wl.records["value"].head(100))


def test_every_record_has_exactly_its_expected_reason(wl, demo_spec):
    assert classify(wl.records, demo_spec) == wl.records["expected_reason"].tolist()


def test_bad_counts_follow_the_shares(wl, params):
    r = wl.records
    shares = params.bad.as_dict()
    for topic, group in r.groupby("topic"):
        counts = group["expected_reason"].value_counts()
        for cls in BAD_CLASSES:
            assert abs(counts.get(cls, 0) - shares[cls] * len(group)) <= 1, (topic, cls)
    assert set(r["expected_reason"].dropna()) == set(BAD_CLASSES)
    good = r[r["expected_reason"].isna()]
    assert (good.side == "left").sum() == len(wl.left)
    assert (good.side == "right").sum() == len(wl.right)


def test_good_records_parse_back_to_the_schema(wl, demo_spec):
    good = wl.records[wl.records["expected_reason"].isna()]
    for side, frame in (("left", wl.left), ("right", wl.right)):
        stream = demo_spec.side(side)
        rows = good[good.side == side]
        objs = [json.loads(v) for v in rows["value"]]
        assert all(list(o) == list(stream.schema_) for o in objs)
        for c, t in stream.schema_.items():
            assert all(_type_ok(o[c], t) for o in objs), (side, c)
        parsed = pd.DataFrame(objs)
        assert (parsed[stream.id].to_numpy() == rows["event_id"].to_numpy()).all()
        assert (parsed[stream.key[0]].to_numpy() == rows["key"].to_numpy()).all()
        assert parsed[stream.event_time].str.match(ISO).all()
        parsed["arrival_ms"] = rows["arrival_ms"].to_numpy()
        both = parsed.merge(frame, left_on=stream.id, right_on="event_id", suffixes=("", "_frame"))
        assert len(both) == len(frame) == len(rows) and frame["event_id"].is_unique
        event_time = pd.to_datetime(both[stream.event_time], format="%Y-%m-%dT%H:%M:%S.%fZ", utc=True)
        assert (event_time == both[f"{stream.event_time}_frame"]).all()
        assert (both["arrival_time"].dt.as_unit("ms").astype("int64") == both["arrival_ms"]).all()
        for c in stream.schema_:
            if c not in (stream.id, stream.event_time):
                assert (both[c] == both[f"{c}_frame"]).all(), c
        assert (frame["event_time"] <= frame["arrival_time"]).all()


def test_good_frames(wl, demo_spec):
    for side in ("left", "right"):
        f = getattr(wl, side)
        assert list(f.columns[:4]) == ["event_id", "key", "event_time", "arrival_time"]
        assert set(demo_spec.side(side).schema_) <= set(f.columns)
        assert str(f["event_time"].dtype) == "datetime64[ms, UTC]"
        assert str(f["arrival_time"].dtype) == "datetime64[ms, UTC]"
        assert (f["key"] == f["session_id"]).all()
        assert f["arrival_time"].is_monotonic_increasing
    assert wl.left["event_id"].str.match(r"^L\d{9}$").all()
    assert wl.right["session_id"].str.match(r"^s\d{6}$").all()


def test_duplicates_resend_an_earlier_record(wl):
    r = wl.records
    dups = r[r["expected_reason"] == "duplicate_event_id"]
    good = r[r["expected_reason"].isna()].set_index(["topic", "event_id"])
    assert len(dups) > 0
    for topic, key, value, arrival, event_id in dups[["topic", "key", "value", "arrival_ms", "event_id"]].itertuples(
        index=False
    ):
        first = good.loc[(topic, event_id)]
        assert first["value"] == value and first["key"] == key
        assert 0 < arrival - first["arrival_ms"] <= 10 * 60_000


def test_event_times_outside_validity_are_really_outside(wl, demo_spec):
    r = wl.records
    max_past = demo_spec.timestamp_validity.max_past.total_seconds() * 1000
    max_future = demo_spec.timestamp_validity.max_future.total_seconds() * 1000
    for reason, check in (
        ("event_time_too_old", lambda et, a: et < a - max_past),
        ("event_time_in_future", lambda et, a: et > a + max_future),
    ):
        rows = r[r["expected_reason"] == reason]
        assert len(rows) > 50
        for value, arrival in zip(rows["value"], rows["arrival_ms"]):
            et = pd.Timestamp(json.loads(value)["event_time"]).value // 10**6
            assert check(et, arrival), (reason, value)


# ------------------------------------------------------------------ realism


def test_delays(wl, demo_spec, params):
    left = (wl.left["arrival_time"] - wl.left["event_time"]).dt.total_seconds()
    assert left.quantile(0.5) < 5 and left.quantile(0.99) < 60
    assert left.max() < params.left_straggler_max.total_seconds() + 1

    right = wl.right
    delay = (right["arrival_time"] - right["event_time"]).dt.total_seconds()
    assert delay.quantile(0.5) < 600, "most clicks arrive within minutes"
    assert delay.quantile(0.99) > 3600, "a tail of hours"
    assert delay.max() < demo_spec.timestamp_validity.max_past.total_seconds()
    local_hour = right["event_time"].dt.tz_convert(demo_spec.timezone).dt.hour
    start, end = params.night_hours
    night = (local_hour >= start) & (local_hour < end)
    assert delay[night].median() > 1.5 * delay[~night].median()
    assert (delay[night] > 3600).mean() > 2 * (delay[~night] > 3600).mean()
    # out of order: arrival order is not event-time order
    assert not right["event_time"].is_monotonic_increasing


def test_matching_truth(wl, params, demo_spec):
    links = wl.links
    assert links["right_event_id"].is_unique
    unmatched = 1 - links["left_event_id"].nunique() / len(wl.left)
    assert abs(unmatched - params.unmatched_share) < 0.01
    per_left = links.groupby("left_event_id").size()
    assert abs(per_left.mean() - params.right_per_match_mean) < 0.1
    orphans = 1 - len(links) / len(wl.right)
    assert abs(orphans - params.right_orphan_share) < 0.005

    pairs = links.merge(wl.left[["event_id", "key", "event_time"]], left_on="left_event_id", right_on="event_id").merge(
        wl.right[["event_id", "key", "event_time"]],
        left_on="right_event_id",
        right_on="event_id",
        suffixes=("_l", "_r"),
    )
    assert len(pairs) == len(links) and (pairs["key_l"] == pairs["key_r"]).all()
    offset = (pairs["event_time_r"] - pairs["event_time_l"]).dt.total_seconds()
    late = (offset > demo_spec.window.upper.total_seconds()).mean()
    before = (offset < 0).mean()
    assert abs(late - params.right_late_share) < 0.005
    assert abs(before - params.right_before_share) < 0.006
    assert offset.min() >= -params.right_before_max.total_seconds()


def test_key_skew_and_diurnal_shape(wl, params, demo_spec):
    per_key = wl.left.groupby("key").size()
    assert per_key.nunique() > 5 and per_key.max() >= 20, "some sessions are hot"
    assert len(per_key) == params.days * params.keys_per_day
    hour = wl.left["event_time"].dt.tz_convert(demo_spec.timezone).dt.hour
    by_hour = hour.value_counts()
    assert by_hour[int(params.diurnal_peak_hour)] > 2.5 * by_hour[(int(params.diurnal_peak_hour) + 12) % 24]
    per_day = wl.left["event_time"].dt.tz_convert(demo_spec.timezone).dt.date.value_counts().sort_index()
    assert len(per_day) <= params.days + 1
    assert (
        per_day.iloc[: params.days].between(0.95 * params.left_events_per_day, 1.05 * params.left_events_per_day).all()
    )


# ------------------------------------------------------------------ spec variations


def test_follows_the_spec(params, demo_spec):
    other = demo_spec.model_copy(
        update={
            "timezone": "America/Los_Angeles",
            "unknown_fields": UnknownFields.ignore,
            "timestamp_validity": demo_spec.timestamp_validity.model_copy(
                update={"max_past": timedelta(hours=30), "max_future": timedelta(minutes=5)}
            ),
        }
    )
    small = params.model_copy(update={"left_events_per_day": 5000, "days": 1})
    wl = generate(small, other)
    r = wl.records
    assert classify(r, other) == r["expected_reason"].tolist()
    assert "unexpected_field" not in set(r["expected_reason"].dropna())
    extra = r[r["value"].str.contains('"debug"|"client_version"|"experiment_id"|"trace_id"|"app_build"')]
    assert len(extra) > 0 and extra["expected_reason"].isna().all()
    assert set(extra["event_id"]) <= set(wl.left["event_id"]) | set(wl.right["event_id"])
    # the first day starts at local midnight in Los Angeles
    first = wl.left["event_time"].min().tz_convert("America/Los_Angeles")
    assert first.date().isoformat() == "2026-11-19" and first.hour < 2


def test_iso_ms_matches_numpy():
    ms = np.random.default_rng(0).integers(0, 4_102_444_800_000, 5000)
    ref = np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms")
    assert [s for s in iso_ms(ms)] == [s + "Z" for s in ref]


# ------------------------------------------------------------------ slices and speed


def test_iter_slices(wl):
    step = 30 * 60_000
    slices = list(iter_slices(wl.records, 30))
    ends = [end for end, _ in slices]
    assert all(b - a == step for a, b in zip(ends, ends[1:])) and ends[0] % step == 0
    assert sum(len(chunk) for _, chunk in slices) == len(wl.records)
    for end, chunk in slices:
        assert ((chunk["arrival_ms"] >= end - step) & (chunk["arrival_ms"] < end)).all()
    pd.testing.assert_frame_equal(pd.concat([c for _, c in slices]), wl.records)
    assert list(iter_slices(wl.records.iloc[:0], 30)) == []
    with pytest.raises(ValueError):
        list(iter_slices(wl.records, 0))


def test_a_day_of_200k_left_events_is_generated_whole(params, demo_spec):
    big = params.model_copy(update={"left_events_per_day": 200_000, "days": 1})
    wl = generate(big, demo_spec)
    assert len(wl.records) > 450_000


def test_slices_cover_a_time_range_on_the_epoch_grid():
    """The slicing rule replay-as-live reads history by: bounds given, empty slices included."""
    import pandas as pd

    hour = 3_600_000
    t0 = 1_763_596_800_000  # 2025-11-20T00:00Z, a multiple of an hour
    records = pd.DataFrame({"arrival_ms": [t0 + hour + 5, t0 + 3 * hour - 1]})
    got = [(end, len(frame)) for end, frame in iter_slices(records, 60, start_ms=t0, end_ms=t0 + 4 * hour)]
    assert got == [(t0 + hour, 0), (t0 + 2 * hour, 1), (t0 + 3 * hour, 1), (t0 + 4 * hour, 0)]
    assert [e for e, _ in iter_slices(records.iloc[:0], 60, start_ms=t0, end_ms=t0 + hour)] == [t0 + hour]
    with pytest.raises(ValueError, match="outside"):
        list(iter_slices(records, 60, start_ms=t0 + 2 * hour, end_ms=t0 + 4 * hour))


def test_a_workload_too_large_to_build_in_memory_is_refused_naming_both_fields():
    """`left_events_per_day: 1000000000000` was a 6 TiB allocation error's traceback."""
    from jobs.workload.params import parse_workload

    with pytest.raises(SpecError, match=r"days x left_events_per_day: 2,000,000,000,000 left events; .* in parts"):
        parse_workload({"left_events_per_day": 1_000_000_000_000})
    assert parse_workload({"left_events_per_day": 5_000_000}).left_events_per_day == 5_000_000
