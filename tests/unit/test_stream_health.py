"""The stream-health snapshot's pure core on crafted progress lines, health samples and restarts:
thresholds from the spec, statuses, the late-drop rate's window, the restarts' 24 h, watermark
vs PT, and the fallback to the supervisor's health log when Kafka cannot be reached."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from jobs.operate.stream_health import (
    assess,
    batch_ranges,
    late_drops,
    pt_per_stream,
    read_restarts,
    restarts_within,
    snapshot,
)
from jobs.report.health_view import health_view, render_health
from jobs.spec import SpecError, parse_spec

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _batch(i: int, *, minutes: float, rows: int, dropped: int = 0, state_rows: int = 900, mem: int = 9000) -> dict:
    """A join-query progress line as Spark 4.2 writes it: batch ``i`` starting ``minutes`` after T0."""
    start = T0 + timedelta(minutes=minutes)
    off = lambda n: json.dumps({"search_responses": {"0": n}})  # noqa: E731
    offr = lambda n: json.dumps({"search_clicks": {"0": n}})  # noqa: E731
    return {
        "runId": "r1",
        "batchId": i,
        "timestamp": _iso(start),
        "numInputRows": rows,
        "durationMs": {"triggerExecution": 2000},
        "sources": [
            {
                "description": "KafkaV2[Subscribe[search_responses]]",
                "startOffset": off(10 * i),
                "endOffset": off(10 * i + 10),
            },
            {
                "description": "KafkaV2[Subscribe[search_clicks]]",
                "startOffset": offr(5 * i),
                "endOffset": offr(5 * i + 5),
            },
        ],
        "stateOperators": [
            {
                "operatorName": "dedupeWithinWatermark",
                "numRowsTotal": 100,
                "memoryUsedBytes": 1000,
                "numRowsDroppedByWatermark": 0,
            },
            {
                "operatorName": "symmetricHashJoin",
                "numRowsTotal": state_rows,
                "memoryUsedBytes": mem,
                "numRowsDroppedByWatermark": dropped,
            },
        ],
        "eventTime": {"watermark": _iso(T0 - timedelta(hours=2))},
    }


@pytest.fixture()
def spec(demo_spec):
    return demo_spec


def test_thresholds_come_from_the_spec_and_bad_values_name_the_field(demo_spec):
    h = demo_spec.health
    assert (h.max_lag_records, h.max_lag_time.total_seconds(), h.max_batch_age.total_seconds()) == (10_000, 600, 120)
    data = demo_spec.model_dump(mode="json", by_alias=True)
    data["health"] = {**data["health"], "max_lag_time": "ten minutes"}
    with pytest.raises(SpecError, match=r"health.max_lag_time: 'ten minutes' is not a duration"):
        parse_spec(data)
    data["health"] = {"max_batch_age": "0s"}
    with pytest.raises(SpecError, match=r"health.max_batch_age: must be positive"):
        parse_spec(data)
    data["health"] = {"max_late_drop_rate": 1.5}
    with pytest.raises(SpecError, match=r"health.max_late_drop_rate"):
        parse_spec(data)
    data["health"] = {"max_lag_time": "5m"}
    assert parse_spec(data).health.max_lag_time.total_seconds() == 300  # the rest keep their defaults
    assert parse_spec(data).health.max_restarts_per_day == 3


def test_a_healthy_stream_is_ok_with_every_value_beside_its_threshold(spec):
    progress = [_batch(i, minutes=i, rows=100) for i in range(5)]
    now = (T0 + timedelta(minutes=4, seconds=30)).timestamp()
    wm = (T0 - timedelta(hours=2)).timestamp() * 1000
    h = assess(
        spec,
        progress,
        now=now,
        lag={"left": 0, "right": 0},
        lag_age={"left": None, "right": None},
        lag_source="kafka",
        lag_sampled_at=now,
        pt_ms={"left": wm + 3_600_000, "right": wm + 600_000},
    )
    assert h.status == "ok", [(c.name, c.stream, c.status) for c in h.checks]
    assert h.last_batch_id == 4 and h.watermark == _iso(T0 - timedelta(hours=2))
    assert h.check("lag_records", "left").value == 0 and h.check("lag_time", "left").value == 0.0
    assert h.check("state_rows").value == 1000 and h.check("state_bytes").value == 10_000
    assert h.check("batch_age").value == pytest.approx(28.0)  # 4m30s - (4m + 2s)
    assert h.check("pt_margin", "left").value == 3600 and h.check("pt_margin", "right").value == 600
    assert h.check("late_drop_rate").value == 0.0 and h.check("restarts_24h").value == 0
    assert h.check("lag_records", "right").threshold == spec.health.max_lag_records


def test_each_value_beyond_its_threshold_is_a_warning(spec):
    t = spec.health
    progress = [_batch(0, minutes=0, rows=100, state_rows=t.max_state_rows + 1, mem=t.max_state_bytes + 1, dropped=5)]
    now = (T0 + timedelta(minutes=10)).timestamp()
    wm = (T0 - timedelta(hours=2)).timestamp() * 1000
    h = assess(
        spec,
        progress,
        now=now,
        lag={"left": t.max_lag_records + 1, "right": 3},
        lag_age={"left": 601.0, "right": 30.0},
        lag_source="kafka",
        restarts=[now - 60 * k for k in range(t.max_restarts_per_day + 1)],
        pt_ms={"left": wm - 1000, "right": wm + 1000},
    )
    warn = {(c.name, c.stream) for c in h.checks if c.status == "warn"}
    assert warn == {
        ("lag_records", "left"),
        ("lag_time", "left"),
        ("state_rows", None),
        ("state_bytes", None),
        ("batch_age", None),
        ("restarts_24h", None),
        ("late_drop_rate", None),
        ("pt_margin", "left"),  # records at the left PT are already behind the watermark
    }
    assert h.status == "warn"
    assert h.check("late_drop_rate").value == pytest.approx(0.05)
    assert h.check("batch_age").note == "records wait"
    assert h.check("pt_margin", "left").value == -1.0


def test_an_old_batch_is_fine_when_everything_is_read_and_a_warning_when_lag_is_unknown(spec):
    progress = [_batch(0, minutes=0, rows=10)]
    now = (T0 + timedelta(hours=3)).timestamp()
    idle = assess(spec, progress, now=now, lag={"left": 0, "right": 0}, lag_source="kafka")
    assert idle.check("batch_age").status == "ok" and "idle" in idle.check("batch_age").note
    blind = assess(spec, progress, now=now)
    assert blind.check("batch_age").status == "warn" and blind.check("batch_age").note == "lag unknown"
    assert blind.check("lag_records", "left").status == "unknown"


def test_late_drop_rate_counts_the_window_before_the_last_batch_only():
    progress = [
        _batch(0, minutes=0, rows=1000, dropped=500),  # more than an hour before the last batch
        _batch(1, minutes=70, rows=100, dropped=1),
        _batch(2, minutes=100, rows=300, dropped=3),
    ]
    assert late_drops(progress, 3600) == (4, 400, 2)
    assert late_drops(progress, 3 * 3600) == (504, 1400, 3)
    assert late_drops([], 3600) == (0, 0, 0)


def test_a_paced_micro_batchs_offsets_leave_its_own_entry_out(demo_spec):
    """The paced engine's one source reads both topics; its end offset also holds the PTs the batch
    ran with under "@paced", which is no topic: every reader of offsets skips it (it used to
    raise ValueError, so health reported Kafka unreachable and `checkpoint inspect` failed)."""
    from jobs.storage.checkpoints import kafka_offsets, source_offsets
    from jobs.storage.progress import end_offsets_read, paced_entry
    from jobs.storage.stream_runs import topics_read

    pacing = {"seq": 4, "left_pt": 1, "right_pt": 2, "paused": ["left"], "idle": [], "steps": 3}
    end = {"search_clicks": {"0": 10, "1": 12}, "search_responses": {"0": 20}, "@paced": pacing}
    start = {"search_clicks": {"0": 4, "1": 12}, "search_responses": {"0": 15}, "@paced": {**pacing, "seq": 3}}
    line = {**_batch(2, minutes=0, rows=11), "sources": [{"startOffset": start, "endOffset": json.dumps(end)}]}
    assert kafka_offsets(end) == {"search_clicks": {0: 10, 1: 12}, "search_responses": {0: 20}}
    assert kafka_offsets(None) == kafka_offsets("not json") == {}
    assert batch_ranges([line], "search_clicks") == [{0: (4, 10)}]
    assert batch_ranges([line], "search_responses") == [{0: (15, 20)}]
    assert end_offsets_read(line) == kafka_offsets(end)
    assert paced_entry(line) == pacing
    assert topics_read(demo_spec, line) == {"left": "search_responses", "right": "search_clicks"}
    assert source_offsets(["v1", end]) == kafka_offsets(end)  # a checkpoint's offsets file: the same rule


def test_a_paced_pipelines_pts_are_its_sources_and_their_synchronization_is_checked(demo_spec):
    """The paced engine's watermark is its right PT, so "PT ahead of watermark" would warn on every
    healthy paced stream (the left PT sits a window's upper bound behind it). Its PTs are the ones
    its source ran with, and what is checked is how far they are from ``left_PT + upper = right_PT``:
    past ``max_drift`` the left stream is paused behind a right stream that fell behind."""
    from jobs.spec import Engine

    spec = demo_spec.model_copy(update={"streaming": demo_spec.streaming.model_copy(update={"engine": Engine.paced})})
    upper = spec.window.upper_seconds * 1000
    left_pt = int(T0.timestamp() * 1000)

    def paced_line(i: int, right_pt: int, paused: list[str]) -> dict:
        entry = {"seq": i, "left_pt": left_pt, "right_pt": right_pt, "paused": paused, "idle": []}
        end = {"search_clicks": {"0": 5 * i}, "search_responses": {"0": 10 * i}, "@paced": entry}
        line = {**_batch(i, minutes=i, rows=100), "sources": [{"startOffset": None, "endOffset": end}]}
        line.pop("eventTime", None)  # no event-time watermark: its windows close by the right PT
        return line

    synced = assess(spec, [paced_line(1, left_pt + upper - 120_000, [])], now=T0.timestamp() + 120)
    assert synced.pt == {"left": "2026-11-22T10:00:00+00:00", "right": "2026-11-22T10:28:00+00:00"}
    assert [c.name for c in synced.checks if c.name.startswith("pt_")] == ["pt_sync"]
    assert synced.watermark == _iso(datetime.fromtimestamp((left_pt + upper - 120_000) / 1000, UTC))
    sync = synced.check("pt_sync")
    assert (sync.value, sync.threshold, sync.status) == (120, 600, "ok")

    behind = assess(spec, [paced_line(2, left_pt + upper - 7_200_000, ["left"])], now=T0.timestamp() + 180)
    sync = behind.check("pt_sync")
    assert (sync.value, sync.status, sync.note) == (7200, "warn", "left paused") and behind.status == "warn"
    assert "PT sync gap (left PT + upper - right PT)" in render_health(behind, now=T0.timestamp() + 180)

    native = assess(demo_spec, [_batch(1, minutes=0, rows=10)], now=T0.timestamp() + 60)
    assert {c.name for c in native.checks if c.name.startswith("pt_")} == {"pt_margin"}


def test_the_paced_operators_late_drops_count_where_spark_counts_none():
    """The paced engine decides lateness in its operator (no event-time column for Spark to drop
    rows by): its ``right_late_dropped`` counter, noted in the progress line, is the drop count."""
    paced = [_batch(0, minutes=0, rows=200), _batch(1, minutes=10, rows=300)]
    paced[1]["joinshift"] = {"paced": {"right_late_dropped": 6, "left_late_closed": 2}}
    assert late_drops(paced, 3600) == (6, 500, 2)


def test_the_paced_operators_counters_are_a_note_of_the_snapshot(demo_spec):
    """Per-key caps and late closes are counted and shown (paper §6.6), not left in the log."""
    from jobs.operate.stream_health import assess, paced_counts
    from jobs.report.health_view import render_health

    progress = [_batch(0, minutes=0, rows=100), _batch(1, minutes=70, rows=200), _batch(2, minutes=100, rows=300)]
    progress[0]["joinshift"] = {"paced": {"right_cap_evicted": 50}}  # before the window: not counted
    progress[1]["joinshift"] = {"paced": {"right_cap_evicted": 3, "left_late_closed": 2, "state_rows": 900}}
    progress[2]["joinshift"] = {"paced": {"right_cap_evicted": 1, "left_amended": 4}}
    assert paced_counts(progress, 3600) == {"left_late_closed": 2, "right_cap_evicted": 4, "left_amended": 4}
    assert paced_counts([_batch(0, minutes=0, rows=10)], 3600) == {}
    h = assess(demo_spec, progress, now=10**10)
    [note] = [n for n in h.notes if n.startswith("paced operator")]
    assert note == (
        "paced operator over the same 2 micro-batches: left_late_closed 2, right_cap_evicted 4, left_amended 4"
    )
    assert note in render_health(h, now=10**10)


def test_the_native_engines_dropped_duplicates_are_a_note_of_the_snapshot(demo_spec):
    """Spark counts the event ids its de-duplication drops in each operator's custom metrics; no
    one read it, so a stream's duplicates were dropped with no count (landing's are quarantined)."""
    from jobs.operate.stream_health import assess, duplicates_dropped

    progress = [_batch(0, minutes=0, rows=100), _batch(1, minutes=70, rows=200), _batch(2, minutes=100, rows=300)]
    for b, n in zip(progress, (40, 3, 2), strict=True):  # the left side's operator; the right's drops none
        b["stateOperators"][0]["customMetrics"] = {"numDroppedDuplicateRows": n}
        b["stateOperators"].insert(1, {**b["stateOperators"][0], "customMetrics": {"numDroppedDuplicateRows": 0}})
    assert duplicates_dropped(progress, 3600) == 5  # the first batch is before the window
    h = assess(demo_spec, progress, now=10**10)
    assert "duplicate event ids dropped over the same 2 micro-batches: 5" in h.notes
    assert "duplicate event ids dropped over the same 2 micro-batches: 5" in render_health(h, now=10**10)
    none = [_batch(0, minutes=0, rows=100), _batch(1, minutes=70, rows=200)]  # no drops: no note
    assert not [n for n in assess(demo_spec, none, now=10**10).notes if n.startswith("duplicate")]


def test_restarts_count_the_last_24_hours_only(spec, tmp_path, monkeypatch):
    now = T0.timestamp()
    times = [now - 90_000, now - 86_000, now - 10, now]
    assert restarts_within(times, now) == 3
    assert restarts_within([], now) == 0

    # the supervisor's restart log, as record_restart writes it
    from jobs.operate.health import record_restart
    from jobs.settings import Settings

    s = Settings(storage_root=str(tmp_path))
    for t in times:
        record_restart(spec, s, {"at": datetime.fromtimestamp(t, UTC).isoformat(), "reason": "exited", "pid": 1})
    assert read_restarts(spec, s) == pytest.approx(times)
    h = assess(spec, [], now=now, restarts=read_restarts(spec, s))
    assert h.check("restarts_24h").value == 3 and h.check("restarts_24h").status == "ok"


def test_pt_per_stream_follows_the_estimator_and_offsets_per_batch_come_from_the_progress():
    rng = np.random.default_rng(1)
    batches = [1_000_000 + 60_000 * i + rng.integers(-30_000, 30_000, 200) for i in range(12)]
    pt = pt_per_stream({"left": [b.astype(float) for b in batches], "right": []})
    assert pt["right"] is None
    assert 1_000_000 + 60_000 * 6 < pt["left"] < 1_000_000 + 60_000 * 12
    ranges = batch_ranges([_batch(3, minutes=0, rows=1)], "search_clicks")
    assert ranges == [{0: (15, 20)}]


def test_without_kafka_the_lag_is_the_health_logs_with_its_age(spec, tmp_path):
    """The UI's process may have no route to the broker: the last sample, said so; never raises."""
    from jobs.operate.health import health_log
    from jobs.settings import Settings
    from jobs.storage.tables import Tables

    s = Settings(storage_root=str(tmp_path), kafka_home=str(tmp_path / "no-kafka"))
    log = tmp_path / "progress" / spec.pipeline / "stream_join.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(json.dumps(_batch(i, minutes=i, rows=100, dropped=1)) for i in range(3)) + "\n{broken")
    assert Tables.of(spec, s).progress_log() == str(log)
    sampled = T0 + timedelta(minutes=3)
    p = health_log(spec, s)
    p.parent.mkdir(parents=True)
    p.write_text(
        json.dumps(
            {
                "sampled_at": _iso(sampled),
                "state": "running",
                "lag_left": 12,
                "lag_right": 0,
                "oldest_unread_age_left_s": 42.0,
                "oldest_unread_age_right_s": None,
            }
        )
        + "\n"
        + json.dumps({"sampled_at": _iso(sampled + timedelta(seconds=10)), "state": "held"})
        + "\n"
    )
    now = (T0 + timedelta(minutes=5)).timestamp()
    h = snapshot(spec, s, now=now)
    assert h.lag_source == "health log" and h.lag_sampled_at == sampled.timestamp()
    assert h.check("lag_records", "left").value == 12 and h.check("lag_time", "left").value == 42.0
    assert h.check("lag_time", "right").value == 0.0  # nothing waits
    assert h.check("pt_margin", "left").status == "unknown"
    assert h.last_batch_id == 2 and h.check("late_drop_rate").value == pytest.approx(0.01)
    assert any("Kafka not reachable" in n for n in h.notes)
    view = health_view(h, now=now)
    assert "health log, sampled 2m ago" in view["lag_source"]
    text = render_health(h, now=now)
    assert "Lag (records) (left)" in text and "≤ 10,000" in text and "Kafka not reachable" in text

    # nothing at all: every value unknown, still a snapshot
    empty = snapshot(spec, Settings(storage_root=str(tmp_path / "none"), kafka_home=str(tmp_path / "nk")), now=now)
    assert empty.status == "unknown" and "no micro-batch logged yet" in empty.notes


def test_health_command_prints_the_snapshot_and_fails_on_a_warning(spec, tmp_path, monkeypatch, capsys):
    from jobs import cli
    from jobs.settings import settings

    monkeypatch.setenv("JOINSHIFT_STORAGE_ROOT", str(tmp_path))
    monkeypatch.setenv("JOINSHIFT_KAFKA_HOME", str(tmp_path / "no-kafka"))
    monkeypatch.delenv("JOINSHIFT_KAFKA_BOOTSTRAP", raising=False)
    settings.cache_clear()
    try:
        log = tmp_path / "progress" / spec.pipeline / "stream_join.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text(json.dumps(_batch(0, minutes=0, rows=10, dropped=5)) + "\n")  # 50 % dropped
        assert cli.main(["health", "--kafka-timeout", "1"]) == 1
        out = capsys.readouterr().out
        assert "Late-drop rate" in out and "50.00%" in out and "warn" in out
        assert cli.main(["health", "--json"]) == 1
        data = json.loads(capsys.readouterr().out)
        assert data["pipeline"] == spec.pipeline and data["status"] == "warn"
    finally:
        settings.cache_clear()
