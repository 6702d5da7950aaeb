"""Restart management for the continuous streaming join (paper §6.1 restarts, §6.4 backlog, §7.3).

The join runs as its **own OS process** (``python -m jobs.stream_join --spec ... --trigger-interval
...``, own session, log under ``<log_dir>``); a light supervisor (no Spark, no JVM) watches it:

* :class:`StreamProcess` starts/finds/kills that process; a pid file under
  ``<storage_root>/supervisor/<pipeline>/stream.pid`` lets the next supervisor (the next Airflow
  run) find the process the previous one started.
* :func:`health` reads the query's progress log (one JSON line per micro-batch, written by
  ``ProgressRecorder``) and Kafka's end offsets, and classifies the job as ``running``,
  ``exited``, ``starting``, ``stalled`` or ``backlogged``.
* :func:`supervise` loops a bounded number of checks; a process that exited or stalled is
  restarted from the same checkpoint (restart = a new process with the same spec), with
  exponential backoff; every check appends a health sample to ``health.jsonl`` beside the pid
  file, which :func:`load_health_table` copies into the Delta table ``stream_health``.

Backlog (§6.4): a join is only *behind* when BOTH inputs are behind: a lagging left stream alone
just means the right side is the slower one, and the window state absorbs it. So the alarm needs,
for each stream, lag in records > 0 (progress ``endOffset`` vs Kafka end offsets) AND the oldest
unread record older than ``backlog_threshold_s``. The oldest unread record's age is its Kafka
timestamp (``publish`` sets it to the arrival time) read by seeking one consumer to the first
unread offset of every lagging partition and fetching one record each; if nothing can be fetched
in time the age is unknown (``None``), which never raises the alarm.

    python -m jobs.supervisor --spec include/specs/search_sessions.yaml --checks 60 --interval 10
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

# same liveness and command-line checks as the embedded broker's process handling
from jobs.kafka_broker import _cmdline, _pid_alive
from jobs.settings import PROJECT_ROOT, Settings, settings
from jobs.spec import JoinSpec, load_spec
from jobs.tables import Tables

log = logging.getLogger("joinshift.supervisor")

JOIN_QUERY = "stream_join"  # jobs.stream_join.JOIN_QUERY (not imported: it pulls in pyspark)
STATES = ("running", "exited", "stalled", "backlogged", "starting", "held")
AlertHook = Callable[[str, str], None]


def _now() -> float:
    return time.time()


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def _parse_iso(s: str | None) -> float | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def supervisor_dir(spec: JoinSpec, s: Settings | None = None) -> Path:
    s = s or settings()
    return Path(s.path("supervisor", spec.pipeline))


def write_spec(spec: JoinSpec, path: str | Path) -> Path:
    """A spec object as the YAML the stream process loads (round-trips through ``load_spec``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(spec.model_dump(mode="json", by_alias=True), sort_keys=False))
    return p


def settings_env(s: Settings) -> dict[str, str]:
    """``JOINSHIFT_*`` variables that make a child process resolve the same settings as ``s``."""
    env = {}
    for f in dataclasses.fields(Settings):
        v = getattr(s, f.name)
        if isinstance(v, str):
            env[f"JOINSHIFT_{f.name.upper()}"] = v
    return env


# ------------------------------------------------------------------ maintenance hold

def hold_file(spec: JoinSpec, s: Settings | None = None) -> Path:
    return supervisor_dir(spec, s) / "hold.json"


def current_hold(spec: JoinSpec, s: Settings | None = None) -> dict[str, Any] | None:
    """The hold a maintenance job (a replay) put on the pipeline, if its process still lives.
    A hold left by a dead process is stale: it is ignored (and said so in the log)."""
    try:
        rec = json.loads(hold_file(spec, s).read_text())
    except (OSError, ValueError):
        return None
    if _pid_alive(rec.get("pid")):
        return rec
    log.warning("ignoring a stale hold on %s left by dead pid %s (%s)", spec.pipeline, rec.get("pid"),
                rec.get("reason"))
    return None


@contextlib.contextmanager
def hold(spec: JoinSpec, s: Settings | None = None, *, reason: str):
    """While held, supervisors neither start nor restart the pipeline's stream process and
    scheduled increments skip: a replay owns the checkpoint folder. Two holds conflict."""
    other = current_hold(spec, s)
    if other is not None and other.get("pid") != os.getpid():
        raise RuntimeError(f"{spec.pipeline} is already held by pid {other['pid']} since {other.get('since')}: "
                           f"{other.get('reason')}")
    path = hold_file(spec, s)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": os.getpid(), "since": _iso(_now()), "reason": reason}) + "\n")
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def stop_stream_process(spec: JoinSpec, s: Settings | None = None) -> int | None:
    """Stop the pipeline's supervised stream process, whatever spec file it was started with
    (found by its pid file); returns the pid stopped, or None if none ran."""
    try:
        rec = json.loads((supervisor_dir(spec, s) / "stream.pid").read_text())
    except (OSError, ValueError):
        return None
    pid = rec.get("pid")
    if not (isinstance(pid, int) and _pid_alive(pid) and "jobs.stream_join" in _cmdline(pid)):
        return None
    proc = StreamProcess(rec["cmd"][rec["cmd"].index("--spec") + 1], spec, s)
    proc.pid, proc.started_at = pid, rec.get("started_at")
    proc.stop()
    log.info("stopped stream process %s of %s", pid, spec.pipeline)
    return pid


# ------------------------------------------------------------------ the stream process

class StreamProcess:
    """The continuous join of one pipeline as a separate, detached process.

    ``start()`` spawns ``python -m jobs.stream_join --spec SPEC --trigger-interval T`` in its own
    session (so killing it takes its Spark JVM along: the whole process group), with the
    environment inherited plus ``JOINSHIFT_*`` for ``s``, output appended to
    ``<log_dir>/stream_join_<pipeline>.log``; a pid file records it for later supervisors.
    """

    def __init__(self, spec_path: str | Path, spec: JoinSpec | None = None, s: Settings | None = None, *,
                 trigger_interval: str | None = None, env: dict[str, str] | None = None):
        self.spec_path = str(Path(spec_path).resolve())
        self.spec = spec or load_spec(self.spec_path)
        self.s = s or settings()
        self.trigger_interval = trigger_interval
        self.extra_env = env or {}
        self.dir = supervisor_dir(self.spec, self.s)
        self.pid_file = self.dir / "stream.pid"
        self.log_file = Path(self.s.log_dir) / f"stream_join_{self.spec.pipeline}.log"
        self._proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.started_at: float | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "jobs.stream_join", "--spec", self.spec_path]
        if self.trigger_interval:
            cmd += ["--trigger-interval", self.trigger_interval]
        return cmd

    def _record(self) -> dict[str, Any]:
        try:
            return json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return {}

    def find(self) -> bool:
        """Adopt the process a previous supervisor started (pid file), if it still runs."""
        rec = self._record()
        pid = rec.get("pid")
        if isinstance(pid, int) and _pid_alive(pid) and "jobs.stream_join" in _cmdline(pid) \
                and self.spec_path in _cmdline(pid):
            self.pid, self.started_at = pid, rec.get("started_at")
            return True
        return False

    def start(self) -> int:
        if self.alive():
            return self.pid  # type: ignore[return-value]
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **settings_env(self.s), **self.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        with open(self.log_file, "ab") as out:
            out.write(f"\n=== {_iso(_now())} start: {' '.join(self.command())}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(self.command(), cwd=str(PROJECT_ROOT), env=env, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        self.pid, self.started_at = self._proc.pid, _now()
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": self.pid, "started_at": self.started_at, "cmd": self.command(),
                                   "log": str(self.log_file)}) + "\n")
        tmp.replace(self.pid_file)
        log.info("started stream process %s for %s (log %s)", self.pid, self.spec.pipeline, self.log_file)
        return self.pid

    def alive(self) -> bool:
        if self._proc is not None and self._proc.pid == self.pid:
            return self._proc.poll() is None
        return _pid_alive(self.pid)

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None and self._proc.pid == self.pid else None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the Python driver and its Spark JVM)."""
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if sig == signal.SIGKILL:
            self._reap(5)

    def _reap(self, timeout: float) -> bool:
        end = _now() + timeout
        while _now() < end:
            if not self.alive():
                return True
            time.sleep(0.1)
        return not self.alive()

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time; removes the pid file."""
        if self.pid is not None and self.alive():
            self.kill(signal.SIGTERM)
            if not self._reap(timeout):
                self.kill(signal.SIGKILL)
        if self.pid is not None:  # the JVM may outlive its Python parent for a moment
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            if self._record().get("pid") == self.pid:
                self.pid_file.unlink()


# ------------------------------------------------------------------ health

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
            "sampled_at": _iso(self.sampled_at), "state": self.state, "reason": self.reason, "pid": self.pid,
            "last_batch_id": self.last_batch_id, "last_progress_at": _iso(self.last_progress_at),
            "batch_duration_ms": self.batch_duration_ms,
            "input_rate_left": g(self.input_rows_per_s, "left"), "input_rate_right": g(self.input_rows_per_s, "right"),
            "state_rows": self.state_rows, "state_memory_bytes": self.state_memory_bytes,
            "watermark": self.watermark, "dropped_by_watermark": self.dropped_by_watermark,
            "lag_left": g(self.lag, "left"), "lag_right": g(self.lag, "right"),
            "oldest_unread_age_left_s": g(self.oldest_unread_age_s, "left"),
            "oldest_unread_age_right_s": g(self.oldest_unread_age_s, "right"),
        }


def last_progress(spec: JoinSpec, s: Settings | None = None) -> dict | None:
    """The last complete line of the join's progress log (cheap: reads the file's tail)."""
    p = Path(Tables.of(spec, s).progress_log(JOIN_QUERY))
    if not p.exists():
        return None
    with open(p, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 256_000))
        lines = f.read().splitlines()
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            return json.loads(line)
    return None


def _end_offsets(progress: dict) -> dict[str, dict[int, int]]:
    done: dict[str, dict[int, int]] = {}
    for src in progress.get("sources", []):
        end = src.get("endOffset") or {}
        end = json.loads(end) if isinstance(end, str) else end
        for topic, parts in end.items():
            for part, off in parts.items():
                done.setdefault(topic, {})[int(part)] = int(off)
    return done


def kafka_lag(spec: JoinSpec, progress: dict, bootstrap: str, *, now: float | None = None,
              timeout_s: float = 5) -> tuple[dict[str, int | None], dict[str, float | None]]:
    """Per stream: records not read yet, and the age (s) of the oldest unread record."""
    from kafka import KafkaConsumer, TopicPartition

    done = _end_offsets(progress)
    now = _now() if now is None else now
    lag: dict[str, int | None] = {"left": None, "right": None}
    age: dict[str, float | None] = {"left": None, "right": None}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=int(timeout_s * 1000) + 1000,
                             bootstrap_timeout_ms=int(timeout_s * 1000), consumer_timeout_ms=int(timeout_s * 1000))
    try:
        behind: dict[TopicPartition, str] = {}
        for side in ("left", "right"):
            topic = spec.side(side).topic
            parts = consumer.partitions_for_topic(topic) or set()
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            if not tps:
                continue
            ends = consumer.end_offsets(tps)
            read = done.get(topic, {})
            lag[side] = sum(max(0, ends[tp] - read.get(tp.partition, 0)) for tp in tps)
            for tp in tps:
                if ends[tp] > read.get(tp.partition, 0):
                    behind[tp] = side
        if behind:
            consumer.assign(list(behind))
            for tp in behind:
                consumer.seek(tp, done.get(tp.topic, {}).get(tp.partition, 0))
            oldest: dict[TopicPartition, int] = {}
            deadline = _now() + timeout_s
            while len(oldest) < len(behind) and _now() < deadline:
                for tp, recs in consumer.poll(timeout_ms=500, max_records=500).items():
                    if recs and tp not in oldest:
                        oldest[tp] = recs[0].timestamp
                        consumer.pause(tp)
            for tp, ts in oldest.items():
                a = max(0.0, now - ts / 1000)
                side = behind[tp]
                age[side] = a if age[side] is None else max(age[side], a)
    finally:
        consumer.close()
    return lag, age


def health(spec: JoinSpec, s: Settings | None = None, *, now: float | None = None, stall_after_s: float = 120,
           backlog_threshold_s: float = 600, process: StreamProcess | None = None,
           bootstrap: str | None = None) -> Health:
    """Classify the job from its process, its progress log and Kafka.

    * ``exited``: no live stream process;
    * ``starting``: alive, no micro-batch since it started, started less than ``stall_after_s`` ago;
    * ``stalled``: alive, records waiting (or lag unknown), but no micro-batch for ``stall_after_s``
      (an idle query that has read everything is ``running``: Spark logs no progress when idle);
    * ``backlogged``: both streams lag AND both oldest unread records are older than
      ``backlog_threshold_s`` (§6.4);
    * ``running``: otherwise.
    """
    s = s or settings()
    now = _now() if now is None else now
    if process is None:
        process = StreamProcess.__new__(StreamProcess)
        process.pid, process._proc = None, None
        rec = {}
        with contextlib.suppress(OSError, ValueError):
            rec = json.loads((supervisor_dir(spec, s) / "stream.pid").read_text())
        process.pid, process.started_at = rec.get("pid"), rec.get("started_at")
    h = Health(state="running", sampled_at=now, pid=process.pid)
    p = last_progress(spec, s)
    if p:
        h.last_batch_id = p.get("batchId")
        dur = (p.get("durationMs") or {}).get("triggerExecution") or p.get("batchDuration")
        h.batch_duration_ms = int(dur) if dur is not None else None
        start = _parse_iso(p.get("timestamp"))
        h.last_progress_at = (start + (h.batch_duration_ms or 0) / 1000) if start else None
        secs = max((h.batch_duration_ms or 0) / 1000, 1e-3)
        for src in p.get("sources", []):
            for side in ("left", "right"):
                if f"[{spec.side(side).topic}]" in src.get("description", ""):
                    h.input_rows_per_s[side] = round(src.get("numInputRows", 0) / secs, 3)
        ops = p.get("stateOperators") or []
        if ops:
            h.state_rows = sum(int(o.get("numRowsTotal", 0)) for o in ops)
            h.state_memory_bytes = sum(int(o.get("memoryUsedBytes", 0)) for o in ops)
            h.dropped_by_watermark = sum(int(o.get("numRowsDroppedByWatermark", 0)) for o in ops)
        h.watermark = (p.get("eventTime") or {}).get("watermark")
        try:
            if bootstrap is None:
                from jobs.kafka_broker import bootstrap_servers
                bootstrap = bootstrap_servers(s)
            h.lag, h.oldest_unread_age_s = kafka_lag(spec, p, bootstrap, now=now)
        except Exception as e:  # the broker may be down: lag unknown
            h.reason = f"lag unknown: {type(e).__name__}: {e}"
            h.lag, h.oldest_unread_age_s = {"left": None, "right": None}, {"left": None, "right": None}

    started = process.started_at
    if not process.alive():
        h.state, h.reason = "exited", "no live stream process"
    elif h.last_progress_at is None or (started and h.last_progress_at < started):
        silent = now - (started or now)
        if silent < stall_after_s:
            h.state, h.reason = "starting", f"no micro-batch yet since start {silent:.0f}s ago"
        elif h.lag and all(v == 0 for v in h.lag.values()):
            # restarted with everything already read: Spark runs no micro-batch, and none is due
            h.state, h.reason = "running", f"idle since start {silent:.0f}s ago: nothing to read"
        else:
            h.state, h.reason = "stalled", f"no micro-batch {silent:.0f}s after start"
    elif now - h.last_progress_at > stall_after_s and any(v is None or v > 0 for v in h.lag.values()):
        h.state = "stalled"
        h.reason = f"no micro-batch for {now - h.last_progress_at:.0f}s with lag {h.lag}"
    elif all((h.lag.get(x) or 0) > 0 and (h.oldest_unread_age_s.get(x) or 0) > backlog_threshold_s
             for x in ("left", "right")):
        h.state = "backlogged"
        h.reason = (f"both streams behind: lag {h.lag}, oldest unread "
                    f"{ {k: round(v or 0) for k, v in h.oldest_unread_age_s.items()} }s > {backlog_threshold_s}s")
    return h


def health_log(spec: JoinSpec, s: Settings | None = None) -> Path:
    return supervisor_dir(spec, s) / "health.jsonl"


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
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    p = health_log(spec, s)
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
    if not rows:
        return 0
    cols = [c.split()[0] for c in HEALTH_SCHEMA.split(", ")]
    df = (spark.createDataFrame([tuple(r.get(c) for c in cols) for r in rows], HEALTH_SCHEMA)
          .dropDuplicates(["sampled_at"]).withColumn("sampled_ts", F.to_timestamp("sampled_at")))
    path = Tables.of(spec, s)._t("stream_health")
    if not DeltaTable.isDeltaTable(spark, path):
        df.write.format("delta").mode("append").save(path)
    else:
        (DeltaTable.forPath(spark, path).alias("t").merge(df.alias("s"), "t.sampled_at = s.sampled_at")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    return len(rows)


PROGRESS_SCHEMA = (
    "run_id STRING, batch_id LONG, started_at STRING, batch_duration_ms LONG, input_rows_left LONG, "
    "input_rows_right LONG, processed_rate_left DOUBLE, processed_rate_right DOUBLE, join_state_rows LONG, "
    "join_state_memory_bytes LONG, dedup_state_rows LONG, state_memory_bytes LONG, watermark STRING, "
    "dropped_by_watermark_join LONG, dropped_by_watermark LONG"
)


def progress_row(spec: JoinSpec, p: dict) -> dict[str, Any]:
    """One micro-batch of the join query (a progress-log line) as a flat ``stream_progress`` row.
    The join's state is one operator holding both sides (rows per side: ``checkpoint inspect``);
    the per-side event-id de-duplication operators are summed as ``dedup_state_rows``."""
    dur = (p.get("durationMs") or {}).get("triggerExecution")
    row: dict[str, Any] = {"run_id": p.get("runId"), "batch_id": p.get("batchId"), "started_at": p.get("timestamp"),
                           "batch_duration_ms": int(dur) if dur is not None else None}
    for side in ("left", "right"):
        srcs = [x for x in p.get("sources", []) if f"[{spec.side(side).topic}]" in x.get("description", "")]
        row[f"input_rows_{side}"] = sum(int(x.get("numInputRows") or 0) for x in srcs)
        rates = [x.get("processedRowsPerSecond") for x in srcs if x.get("processedRowsPerSecond") is not None]
        row[f"processed_rate_{side}"] = float(sum(rates)) if rates else None
    ops = p.get("stateOperators") or []
    join = [o for o in ops if "join" in str(o.get("operatorName", "")).lower()]
    dedup = [o for o in ops if o not in join]
    total = lambda os_, k: sum(int(o.get(k) or 0) for o in os_)  # noqa: E731
    row.update({
        "join_state_rows": total(join, "numRowsTotal"), "join_state_memory_bytes": total(join, "memoryUsedBytes"),
        "dedup_state_rows": total(dedup, "numRowsTotal"), "state_memory_bytes": total(ops, "memoryUsedBytes"),
        "watermark": (p.get("eventTime") or {}).get("watermark"),
        "dropped_by_watermark_join": total(join, "numRowsDroppedByWatermark"),
        "dropped_by_watermark": total(ops, "numRowsDroppedByWatermark"),
    })
    return row


def load_progress_table(spark, spec: JoinSpec, s: Settings | None = None) -> int:
    """Copy the join query's progress log into the Delta table ``stream_progress``, one row per
    micro-batch (MERGE on run id and batch id: re-loading never duplicates; a batch re-run after
    a crash has its own run id, so both attempts are kept). The stream process appends the log
    as each batch ends (a Delta commit per batch from the listener would double the batch's
    fixed cost); the supervise DAG loads it. Returns the number of batches loaded."""
    from delta.tables import DeltaTable

    p = Path(Tables.of(spec, s).progress_log(JOIN_QUERY))
    rows = []
    if p.exists():
        for line in p.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(progress_row(spec, json.loads(line)))
    if not rows:
        return 0
    cols = [c.split()[0] for c in PROGRESS_SCHEMA.split(", ")]
    df = spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], PROGRESS_SCHEMA) \
        .dropDuplicates(["run_id", "batch_id"])
    path = Tables.of(spec, s).stream_progress
    if not DeltaTable.isDeltaTable(spark, path):
        df.write.format("delta").mode("append").save(path)
    else:
        (DeltaTable.forPath(spark, path).alias("t")
         .merge(df.alias("s"), "t.run_id = s.run_id AND t.batch_id = s.batch_id")
         .whenNotMatchedInsertAll().execute())
    return len(rows)


# ------------------------------------------------------------------ supervision

@dataclass
class SupervisionReport:
    pipeline: str
    checks: int = 0
    restarts: list[dict[str, Any]] = field(default_factory=list)  # {at, reason, backoff_s, pid}
    states: dict[str, int] = field(default_factory=dict)
    alerts: list[dict[str, str]] = field(default_factory=list)
    last: dict[str, Any] | None = None
    gave_up: bool = False
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def log_alert(kind: str, message: str) -> None:
    log.error("ALERT [%s] %s", kind, message)


class Supervisor:
    """One pipeline's supervision, one :meth:`check` at a time: the loop of :func:`supervise` and
    the pokes of the ``joinshift_supervise`` sensor both drive it. What it must remember between
    checks (restarts in a row for the backoff, the batch seen at the last restart, whether a hold
    was on, the report so far) is :meth:`memory`, which a sensor keeps in a file between pokes.

    The n-th restart in a row waits ``backoff_s[n]`` (the last value repeats) before starting;
    a new micro-batch after a restart resets the count. More than ``max_restarts`` restarts raise
    the ``restart_limit`` alert and end supervision (``gave_up``). While a maintenance
    :func:`hold` is on (a replay owns the checkpoint), it neither starts nor restarts the process
    and counts the checks as ``held``; when the hold ends it starts it.
    """

    def __init__(self, spec: JoinSpec, s: Settings | None = None, *, spec_path: str | Path,
                 stall_after_s: float = 120, backlog_threshold_s: float = 600, max_restarts: int = 10,
                 backoff_s: Sequence[float] = (1, 2, 4, 8, 16, 32, 60), trigger_interval: str | None = None,
                 on_alert: AlertHook | None = log_alert, stop: threading.Event | None = None,
                 process: StreamProcess | None = None, bootstrap: str | None = None,
                 env: dict[str, str] | None = None, on_restart: Callable[[dict[str, Any]], None] | None = None,
                 memory: dict[str, Any] | None = None):
        self.spec, self.s = spec, s or settings()
        self.stall_after_s, self.backlog_threshold_s = stall_after_s, backlog_threshold_s
        self.max_restarts, self.backoff_s = max_restarts, tuple(backoff_s)
        self.alert = on_alert or (lambda kind, msg: None)
        self.stop, self.bootstrap, self.on_restart = stop, bootstrap, on_restart
        self.proc = process or StreamProcess(spec_path, spec, self.s, trigger_interval=trigger_interval, env=env)
        m = memory or {}
        self.report = SupervisionReport(**m["report"]) if "report" in m else SupervisionReport(spec.pipeline)
        self.in_a_row: int = m.get("in_a_row", 0)
        self.batch_at_restart: int | None = m.get("batch_at_restart")
        self.was_held: bool = m.get("was_held", False)

    def memory(self) -> dict[str, Any]:
        return {"report": self.report.as_dict(), "in_a_row": self.in_a_row,
                "batch_at_restart": self.batch_at_restart, "was_held": self.was_held}

    def _wait(self, seconds: float) -> bool:
        """Sleep; False if ``stop`` was set meanwhile."""
        if self.stop is not None:
            return not self.stop.wait(seconds)
        time.sleep(seconds)
        return True

    def ensure_started(self) -> None:
        """Adopt the running process (pid file) or start it, unless the pipeline is held."""
        held = current_hold(self.spec, self.s)
        self.was_held = self.was_held or held is not None
        if not self.proc.alive() and not self.proc.find() and held is None:
            self.proc.start()
            self.report.restarts.append({"at": _iso(_now()), "reason": "not running", "backoff_s": 0,
                                         "pid": self.proc.pid})
        self.report.pid = self.proc.pid

    def check(self) -> bool:
        """One health check, and a restart if it exited or stalled. False: supervision must end
        (it gave up, or ``stop`` was set during a backoff)."""
        spec, s, report, proc = self.spec, self.s, self.report, self.proc
        if not proc.alive():
            proc.find()  # adopt what an earlier check or poke started (a sensor's poke starts with no pid)
        held = current_hold(spec, s)
        if held is not None:  # a replay owns the checkpoint: hands off
            report.checks += 1
            report.states["held"] = report.states.get("held", 0) + 1
            report.last = {"sampled_at": _iso(_now()), "state": "held",
                           "reason": f"held by pid {held['pid']} since {held.get('since')}: {held.get('reason')}"}
            self.was_held = True
            return True
        if self.was_held:  # the hold ended (a replay finished): start from the new checkpoint, no backoff
            self.was_held = False
            if not proc.alive() and not proc.find():
                proc.start()
                report.restarts.append({"at": _iso(_now()), "reason": "hold ended", "backoff_s": 0,
                                        "pid": proc.pid})
        h = health(spec, s, stall_after_s=self.stall_after_s, backlog_threshold_s=self.backlog_threshold_s,
                   process=proc, bootstrap=self.bootstrap)
        report.checks += 1
        report.states[h.state] = report.states.get(h.state, 0) + 1
        report.last = h.row()
        write_health(None, spec, s, h)
        if h.last_batch_id is not None and self.batch_at_restart is not None \
                and h.last_batch_id != self.batch_at_restart and h.state in ("running", "backlogged"):
            self.in_a_row = 0
        if h.state == "backlogged":
            report.alerts.append({"kind": "backlogged", "message": h.reason})
            self.alert("backlogged", f"{spec.pipeline}: {h.reason}")
        if h.state not in ("exited", "stalled"):
            report.pid = proc.pid
            return True
        if len(report.restarts) >= self.max_restarts:
            report.gave_up = True
            msg = f"{spec.pipeline}: {len(report.restarts)} restarts, giving up ({h.state}: {h.reason})"
            report.alerts.append({"kind": "restart_limit", "message": msg})
            self.alert("restart_limit", msg)
            return False
        wait = self.backoff_s[min(self.in_a_row, len(self.backoff_s) - 1)] if self.backoff_s else 0
        rc = proc.returncode()
        reason = f"{h.state}: {h.reason}" + (f" (exit code {rc})" if rc is not None else "")
        self.alert("restart", f"{spec.pipeline}: restarting in {wait}s after {reason}")
        if h.state == "stalled":
            proc.stop(timeout=10)
        if wait and not self._wait(wait):
            return False
        proc.start()
        self.in_a_row, self.batch_at_restart = self.in_a_row + 1, h.last_batch_id
        entry = {"at": _iso(_now()), "reason": reason, "backoff_s": wait, "pid": proc.pid}
        report.restarts.append(entry)
        report.pid = proc.pid
        if self.on_restart:
            self.on_restart(entry)
        return True


def supervise(spec: JoinSpec, s: Settings | None = None, *, spec_path: str | Path, checks: int = 54,
              interval_s: float = 10, stop: threading.Event | None = None, **options: Any) -> SupervisionReport:
    """Ensure the stream process runs, check it ``checks`` times every ``interval_s`` seconds, and
    restart it from its checkpoint when it exited or stalled (:class:`Supervisor`; ``options``
    are its keyword arguments). ``stop`` ends the loop early; the process keeps running either
    way (the next call adopts it by pid file)."""
    sup = Supervisor(spec, s, spec_path=spec_path, stop=stop, **options)
    sup.ensure_started()
    for i in range(checks):
        if stop is not None and stop.is_set():
            break
        if i and not sup._wait(interval_s):
            break
        if not sup.check():
            break
    return sup.report


def supervise_step(spec: JoinSpec, s: Settings | None = None, *, spec_path: str | Path, watch: str,
                   watch_s: float, **options: Any) -> tuple[bool, SupervisionReport]:
    """One poke of the ``joinshift_supervise`` sensor: one check of the watch ``watch`` (e.g. the
    Airflow run id), remembering backoff and the report across pokes in a file beside the pid
    file. Returns (the watch lasted ``watch_s``, the report so far)."""
    f = supervisor_dir(spec, s) / "watch.json"
    memory: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(f.read_text())
        # a retry of a watch that gave up starts over, with a fresh restart budget
        if saved.get("watch") == watch and not saved["memory"]["report"].get("gave_up"):
            memory = saved
    sup = Supervisor(spec, s, spec_path=spec_path, memory=memory.get("memory"), **options)
    started = memory.get("started", _now())
    if not memory:
        sup.ensure_started()
    going = sup.check()
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"watch": watch, "started": started, "memory": sup.memory()}))
    tmp.replace(f)
    return (not going) or _now() - started >= watch_s, sup.report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.supervisor", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True)
    p.add_argument("--checks", type=int, default=54)
    p.add_argument("--interval", type=float, default=10)
    p.add_argument("--stall-after", type=float, default=120)
    p.add_argument("--trigger-interval")
    p.add_argument("--stop", action="store_true", help="stop the supervised process and exit")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = load_spec(args.spec)
    if args.stop:
        proc = StreamProcess(args.spec, spec)
        if proc.find():
            proc.stop()
        return 0
    report = supervise(spec, spec_path=args.spec, checks=args.checks, interval_s=args.interval,
                       stall_after_s=args.stall_after, trigger_interval=args.trigger_interval)
    print(json.dumps(report.as_dict(), indent=2))
    return 1 if report.gave_up else 0


if __name__ == "__main__":
    raise SystemExit(main())
