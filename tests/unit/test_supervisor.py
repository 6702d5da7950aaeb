"""Pure pieces of supervision: a progress-log line as a `stream_progress` row."""

from __future__ import annotations

from pathlib import Path

from jobs.spec import load_spec
from jobs.supervisor import PROGRESS_SCHEMA, progress_row

SPEC = load_spec(Path(__file__).resolve().parents[2] / "include" / "specs" / "search_sessions.yaml")


def _progress() -> dict:
    """The shape Spark 4.2 writes for the join query: two Kafka sources, two de-dup operators and
    the join operator."""
    src = lambda topic, n, rate: {"description": f"KafkaV2[Subscribe[{topic}]]", "numInputRows": n,  # noqa: E731
                                  "processedRowsPerSecond": rate}
    op = lambda name, rows, mem, dropped: {"operatorName": name, "numRowsTotal": rows,  # noqa: E731
                                           "memoryUsedBytes": mem, "numRowsDroppedByWatermark": dropped}
    return {
        "runId": "r1", "batchId": 4, "timestamp": "2026-11-22T10:00:00.000Z",
        "durationMs": {"triggerExecution": 1800},
        "sources": [src("search_responses", 120, 66.7), src("search_clicks", 170, 94.4)],
        "stateOperators": [op("dedupeWithinWatermark", 100, 1000, 1), op("dedupeWithinWatermark", 150, 1500, 2),
                           op("symmetricHashJoin", 900, 9000, 3)],
        "eventTime": {"watermark": "2026-11-19T10:00:00.000Z"},
    }


def test_a_progress_line_becomes_one_row_with_every_column():
    row = progress_row(SPEC, _progress())
    assert set(row) == {c.split()[0] for c in PROGRESS_SCHEMA.split(", ")}
    assert row["input_rows_left"] == 120 and row["input_rows_right"] == 170
    assert row["processed_rate_right"] == 94.4
    assert (row["join_state_rows"], row["join_state_memory_bytes"], row["dedup_state_rows"]) == (900, 9000, 250)
    assert (row["dropped_by_watermark_join"], row["dropped_by_watermark"]) == (3, 6)
    assert row["state_memory_bytes"] == 11500 and row["batch_duration_ms"] == 1800


def test_an_idle_batch_has_zero_inputs_not_missing_ones():
    p = _progress()
    p["sources"] = [{**x, "numInputRows": 0, "processedRowsPerSecond": 0.0} for x in p["sources"]]
    row = progress_row(SPEC, p)
    assert row["input_rows_left"] == 0 and row["processed_rate_left"] == 0.0
