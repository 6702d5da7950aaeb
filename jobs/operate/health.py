"""The stream's health: one sample per check (process, progress log, Kafka lag), and the Delta
tables ``stream_health`` and ``stream_progress`` loaded from the samples and the progress log.

Backlog (§6.4): a join is only *behind* when BOTH inputs are behind: a lagging left stream alone
just means the right side is the slower one, and the window state absorbs it. So the alarm needs,
for each stream, lag in records > 0 (progress ``endOffset`` vs Kafka end offsets) AND the oldest
unread record older than ``backlog_threshold_s`` (the spec's ``health.max_lag_time``). The oldest
unread record's age is its Kafka timestamp (``publish`` sets it to the arrival time); if nothing
can be fetched in time the age is unknown (``None``), which never raises the alarm.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.operate.process import StreamProcess
from jobs.settings import Settings, settings
from jobs.spec import JoinSpec
from jobs.storage import fs, kafka
from jobs.storage.hold import supervisor_dir
from jobs.storage.processes import busy_cores
from jobs.storage.progress import (
    DEDUP_STATE,
    JOIN_QUERY,
    JOIN_STATE,
    PACED_STATE,
    batch_watermark,
    end_offsets_read,
    last_progress,
    state_operators,
)
from jobs.storage.stream_runs import topics_read
from jobs.storage.tables import Tables

STATES = ("running", "exited", "stalled", "backlogged", "starting", "held")
#: A silent process at least this busy (cores, its JVM included) is inside a long micro-batch (the
#: first one after an outage reads the whole backlog), not stalled, until :data:`BUSY_STALL_FACTOR`
#: times ``health.max_batch_age`` have passed: killing it would start the same batch over, forever.
BUSY_CORES = 0.25
BUSY_STALL_FACTOR = 10


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _parse_iso(s: str | None) -> float | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


@dataclass
class Health:
    state: str
    sampled_at: float
    pid: int | None = None
    last_batch_id: int | None = None
    last_progress_at: float | None = None
    batch_duration_ms: int | None = None
    input_rows_per_s: dict[str, float] = field(default_factory=dict)  # per stream (left/right)
    state_rows: int | None = None
    state_memory_bytes: int | None = None
    watermark: str | None = None
    dropped_by_watermark: int | None = None
    lag: dict[str, int | None] = field(default_factory=dict)  # records not read yet, per stream
    oldest_unread_age_s: dict[str, float | None] = field(default_factory=dict)
    reason: str = ""

    def row(self) -> dict[str, Any]:
        """One flat health sample (a JSON line, a Delta row)."""
        g = lambda d, k: d.get(k)  # noqa: E731
        return {
            "sampled_at": iso(self.sampled_at),
            "state": self.state,
            "reason": self.reason,
            "pid": self.pid,
            "last_batch_id": self.last_batch_id,
            "last_progress_at": iso(self.last_progress_at),
            "batch_duration_ms": self.batch_duration_ms,
            "input_rate_left": g(self.input_rows_per_s, "left"),
            "input_rate_right": g(self.input_rows_per_s, "right"),
            "state_rows": self.state_rows,
            "state_memory_bytes": self.state_memory_bytes,
            "watermark": self.watermark,
            "dropped_by_watermark": self.dropped_by_watermark,
            "lag_left": g(self.lag, "left"),
            "lag_right": g(self.lag, "right"),
            "oldest_unread_age_left_s": g(self.oldest_unread_age_s, "left"),
            "oldest_unread_age_right_s": g(self.oldest_unread_age_s, "right"),
        }


def kafka_lag(
    spec: JoinSpec, progress: dict[str, Any], bootstrap: str, *, now: float | None = None, timeout_s: float = 5
) -> tuple[dict[str, int | None], dict[str, float | None]]:
    """Per stream: records not read yet, and the age (s) of the oldest unread record."""
    done = end_offsets_read(progress)
    now = time.time() if now is None else now
    topics = topics_read(spec, progress)
    ends = kafka.end_offsets(bootstrap, list(topics.values()), int(timeout_s * 1000))
    oldest = kafka.oldest_unread(bootstrap, done, ends, timeout_s)
    lag: dict[str, int | None] = {}
    age: dict[str, float | None] = {}
    for side, topic in topics.items():
        lag[side] = kafka.lag({topic: done.get(topic, {})}, {topic: ends[topic]}) if ends.get(topic) else None
        age[side] = max(0.0, now - oldest[topic] / 1000) if topic in oldest else None
    return lag, age


def health(
    spec: JoinSpec,
    s: Settings | None = None,
    *,
    now: float | None = None,
    stall_after_s: float | None = None,
    backlog_threshold_s: float | None = None,
    process: StreamProcess | None = None,
    bootstrap: str | None = None,
) -> Health:
    """Classify the job from its process, its progress log and Kafka.

    * ``exited``: no live stream process;
    * ``starting``: alive, no micro-batch since it started, started less than ``stall_after_s`` ago;
    * ``stalled``: alive, records waiting (or lag unknown), but no micro-batch for ``stall_after_s``
      (an idle query that has read everything is ``running``: Spark logs no progress when idle;
      so is one whose processes keep :data:`BUSY_CORES` busy, inside a long micro-batch, until
      :data:`BUSY_STALL_FACTOR` × ``stall_after_s``);
    * ``backlogged``: both streams lag AND both oldest unread records are older than
      ``backlog_threshold_s`` (§6.4);
    * ``running``: otherwise.

    The two thresholds default to the spec's ``health.max_batch_age`` and ``health.max_lag_time``.
    """
    s = s or settings()
    if stall_after_s is None:
        stall_after_s = spec.health.max_batch_age.total_seconds()
    if backlog_threshold_s is None:
        backlog_threshold_s = spec.health.max_lag_time.total_seconds()
    now = time.time() if now is None else now
    if process is None:
        process = StreamProcess.__new__(StreamProcess)
        process.pid, process._proc = None, None
        rec = {}
        with contextlib.suppress(OSError, ValueError):
            rec = json.loads((supervisor_dir(spec, s) / "stream.pid").read_text())
        process.pid, process.started_at = rec.get("pid"), rec.get("started_at")
    h = Health(state="running", sampled_at=now, pid=process.pid)
    p = last_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    if p:
        h.last_batch_id = p.get("batchId")
        dur = (p.get("durationMs") or {}).get("triggerExecution") or p.get("batchDuration")
        h.batch_duration_ms = int(dur) if dur is not None else None
        start = _parse_iso(p.get("timestamp"))
        h.last_progress_at = (start + (h.batch_duration_ms or 0) / 1000) if start else None
        secs = max((h.batch_duration_ms or 0) / 1000, 1e-3)
        topics = topics_read(spec, p)
        for src in p.get("sources", []):
            for side in ("left", "right"):
                if f"[{topics[side]}]" in src.get("description", ""):
                    h.input_rows_per_s[side] = round(src.get("numInputRows", 0) / secs, 3)
        ops = p.get("stateOperators") or []
        if ops:
            h.state_rows = sum(int(o.get("numRowsTotal", 0)) for o in ops)
            h.state_memory_bytes = sum(int(o.get("memoryUsedBytes", 0)) for o in ops)
            h.dropped_by_watermark = sum(int(o.get("numRowsDroppedByWatermark", 0)) for o in ops)
        h.watermark = batch_watermark(p)
        try:
            if bootstrap is None:
                bootstrap = kafka.bootstrap_servers(s)
            h.lag, h.oldest_unread_age_s = kafka_lag(spec, p, bootstrap, now=now)
        except Exception as e:  # the broker may be down: lag unknown
            h.reason = f"lag unknown: {type(e).__name__}: {e}"
            h.lag, h.oldest_unread_age_s = {"left": None, "right": None}, {"left": None, "right": None}

    started = process.started_at

    def busy(silent: float) -> str | None:
        """Why a silent process is not stalled: it works on a micro-batch (None: it does not)."""
        if silent > BUSY_STALL_FACTOR * stall_after_s or process.pid is None:
            return None
        cores = busy_cores(process.pid)
        return None if cores < BUSY_CORES else f"a micro-batch in progress {silent:.0f}s: busy at {cores:.1f} cores"

    if not process.alive():
        h.state, h.reason = "exited", "no live stream process"
    elif h.last_progress_at is None or (started and h.last_progress_at < started):
        silent = now - (started or now)
        if silent < stall_after_s:
            h.state, h.reason = "starting", f"no micro-batch yet since start {silent:.0f}s ago"
        elif h.lag and all(v == 0 for v in h.lag.values()):
            # restarted with everything already read: Spark runs no micro-batch, and none is due
            h.state, h.reason = "running", f"idle since start {silent:.0f}s ago: nothing to read"
        elif working := busy(silent):
            h.state, h.reason = "starting", working
        else:
            h.state, h.reason = "stalled", f"no micro-batch {silent:.0f}s after start"
    elif now - h.last_progress_at > stall_after_s and any(v is None or v > 0 for v in h.lag.values()):
        if working := busy(now - h.last_progress_at):
            h.state, h.reason = "running", working
        else:
            h.state = "stalled"
            h.reason = f"no micro-batch for {now - h.last_progress_at:.0f}s with lag {h.lag}"
    elif all(
        (h.lag.get(x) or 0) > 0 and (h.oldest_unread_age_s.get(x) or 0) > backlog_threshold_s for x in ("left", "right")
    ):
        h.state = "backlogged"
        h.reason = (
            f"both streams behind: lag {h.lag}, oldest unread "
            f"{ {k: round(v or 0) for k, v in h.oldest_unread_age_s.items()} }s > {backlog_threshold_s}s"
        )
    return h


def health_log(spec: JoinSpec, s: Settings | None = None) -> Path:
    return supervisor_dir(spec, s) / "health.jsonl"


def restart_log(spec: JoinSpec, s: Settings | None = None) -> Path:
    """One JSON line per restart of the stream process: ``{at, reason, backoff_s, pid}``."""
    return supervisor_dir(spec, s) / "restarts.jsonl"


def record_restart(spec: JoinSpec, s: Settings | None, entry: dict[str, Any]) -> None:
    """Append a restart to :func:`restart_log` (what "restarts in 24 h" counts)."""
    p = restart_log(spec, s)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as f:
        f.write(json.dumps(entry) + "\n")


def write_health(spark_or_none, spec: JoinSpec, s: Settings | None, h: Health) -> None:
    """Append a sample to ``health.jsonl`` (the light path); with a Spark session also load the
    samples into the Delta table ``stream_health``."""
    p = health_log(spec, s)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as f:
        f.write(json.dumps(h.row()) + "\n")
    if spark_or_none is not None:
        load_health_table(spark_or_none, spec, s)


HEALTH_SCHEMA = (
    "sampled_at STRING, state STRING, reason STRING, pid LONG, last_batch_id LONG, last_progress_at STRING, "
    "batch_duration_ms LONG, input_rate_left DOUBLE, input_rate_right DOUBLE, state_rows LONG, "
    "state_memory_bytes LONG, watermark STRING, dropped_by_watermark LONG, lag_left LONG, lag_right LONG, "
    "oldest_unread_age_left_s DOUBLE, oldest_unread_age_right_s DOUBLE"
)


def load_health_table(spark, spec: JoinSpec, s: Settings | None = None) -> int:
    """Copy ``health.jsonl`` into the Delta table ``stream_health`` (MERGE on ``sampled_at``:
    re-loading replaces samples, never duplicates). Returns the number of samples loaded."""
    from pyspark.sql import functions as F

    from jobs.storage import delta_io  # Spark-free at import: the supervisor runs without a JVM

    p = health_log(spec, s)
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
    if not rows:
        return 0
    cols = [c.split()[0] for c in HEALTH_SCHEMA.split(", ")]
    df = (
        spark.createDataFrame([tuple(r.get(c) for c in cols) for r in rows], HEALTH_SCHEMA)
        .dropDuplicates(["sampled_at"])
        .withColumn("sampled_ts", F.to_timestamp("sampled_at"))
    )
    delta_io.upsert(df, Tables.of(spec, s)._t("stream_health"), ["sampled_at"])
    return len(rows)


PROGRESS_SCHEMA = (
    "run_id STRING, batch_id LONG, started_at STRING, batch_duration_ms LONG, input_rows_left LONG, "
    "input_rows_right LONG, processed_rate_left DOUBLE, processed_rate_right DOUBLE, join_state_rows LONG, "
    "join_state_memory_bytes LONG, dedup_state_rows LONG, state_memory_bytes LONG, watermark STRING, "
    "dropped_by_watermark_join LONG, dropped_by_watermark LONG"
)


def progress_row(spec: JoinSpec, p: dict) -> dict[str, Any]:
    """One micro-batch of the join query (a progress-log line) as a flat ``stream_progress`` row.
    The join's state is one operator holding both sides (rows per side: ``checkpoint inspect``), or
    the paced engine's operator; the per-side event-id de-duplication operators are summed as
    ``dedup_state_rows``."""
    dur = (p.get("durationMs") or {}).get("triggerExecution")
    row: dict[str, Any] = {
        "run_id": p.get("runId"),
        "batch_id": p.get("batchId"),
        "started_at": p.get("timestamp"),
        "batch_duration_ms": int(dur) if dur is not None else None,
    }
    topics = topics_read(spec, p)
    for side in ("left", "right"):
        srcs = [x for x in p.get("sources", []) if f"[{topics[side]}]" in x.get("description", "")]
        row[f"input_rows_{side}"] = sum(int(x.get("numInputRows") or 0) for x in srcs)
        rates = [x.get("processedRowsPerSecond") for x in srcs if x.get("processedRowsPerSecond") is not None]
        row[f"processed_rate_{side}"] = float(sum(rates)) if rates else None
    ops = p.get("stateOperators") or []
    join = state_operators(ops, JOIN_STATE) + state_operators(ops, PACED_STATE)
    dedup = state_operators(ops, DEDUP_STATE)
    total = lambda os_, k: sum(int(o.get(k) or 0) for o in os_)  # noqa: E731
    row.update(
        {
            "join_state_rows": total(join, "numRowsTotal"),
            "join_state_memory_bytes": total(join, "memoryUsedBytes"),
            "dedup_state_rows": total(dedup, "numRowsTotal"),
            "state_memory_bytes": total(ops, "memoryUsedBytes"),
            "watermark": batch_watermark(p),
            "dropped_by_watermark_join": total(join, "numRowsDroppedByWatermark"),
            "dropped_by_watermark": total(ops, "numRowsDroppedByWatermark"),
        }
    )
    return row


def load_progress_table(spark, spec: JoinSpec, s: Settings | None = None) -> int:
    """Copy the join query's progress log into the Delta table ``stream_progress``, one row per
    micro-batch (MERGE on run id and batch id: re-loading never duplicates; a batch re-run after
    a crash has its own run id, so both attempts are kept). The stream process appends the log
    as each batch ends (a Delta commit per batch from the listener would double the batch's
    fixed cost); the supervise DAG loads it. Returns the number of batches loaded."""
    from jobs.storage import delta_io  # Spark-free at import: the supervisor runs without a JVM

    try:
        lines = fs.read_text(Tables.of(spec, s).progress_log(JOIN_QUERY)).splitlines()
    except FileNotFoundError:
        lines = []
    rows = []
    if lines:
        for line in lines:
            with contextlib.suppress(ValueError):
                rows.append(progress_row(spec, json.loads(line)))
    if not rows:
        return 0
    cols = [c.split()[0] for c in PROGRESS_SCHEMA.split(", ")]
    df = spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], PROGRESS_SCHEMA).dropDuplicates(
        ["run_id", "batch_id"]
    )
    # a batch re-run after a crash has its own run id: both attempts are kept
    delta_io.insert_new(df, Tables.of(spec, s).stream_progress, ["run_id", "batch_id"], partition_by=(), prune=())
    return len(rows)
