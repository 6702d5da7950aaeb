"""Stream health at a glance: one snapshot per pipeline of the values an operator watches, each
beside its threshold from the spec's ``health`` section and an ``ok`` / ``warn`` / ``unknown``
status. ``joinshift health`` prints it; the Airflow UI page shows it per pipeline.

Per stream (left, right):

* **lag in records**: Kafka end offsets minus the offsets the last micro-batch read up to;
* **lag in time**: the age of the oldest record not read yet (its Kafka timestamp, which
  ``publish`` sets to the arrival time); 0 when nothing waits;
* **PT margin**: the stream's processing time (paper §5.3, :class:`PTEstimator`: a low percentile
  of recent event times) minus the join's event-time watermark. Negative: records at the
  stream's PT are already behind the watermark, so the join drops them as late. PT is estimated
  from the event times of the records the latest micro-batches read, fetched back from Kafka
  by the offset ranges in the progress log (at most ``pt_max_records``; the first records of
  each range when there are more, which errs towards a lower, more cautious PT).

For the query: **state rows and bytes** (every state operator of the last micro-batch: the join's
window state and the event-id de-duplication), **last micro-batch age** (a warning only while
records wait, or may wait: an idle query that has read everything logs no progress), **restarts
in 24 h** (the supervisor's restart log), **late-drop rate** (rows dropped by the watermark, or
by the paced operator as late, over input rows, over the micro-batches of ``late_drop_window``
before the last one: a stopped stream still shows its last hour); for the paced engine, a note with
its operator's counters over the same micro-batches (late closes and drops, per-key cap closes and
evictions, duplicates, amendments: paper §6.6, counted and never silent).

Kafka is asked with a short timeout. When it cannot be reached (the UI's process may have no
route to the broker), lag is what the supervisor's health log last recorded, with that sample's
time, and the snapshot says so; PT is then unknown. :func:`assess` is the pure core (progress
lines, samples and restart times in, snapshot out); :func:`snapshot` gathers its inputs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from jobs.join.avro import decode_or_why
from jobs.join.paced import METRICS
from jobs.join.pt_estimator import PTEstimator
from jobs.operate.health import health_log, kafka_lag, restart_log
from jobs.settings import Settings
from jobs.spec import Engine, JoinSpec
from jobs.spec.avro import Encoding
from jobs.storage import kafka
from jobs.storage.checkpoints import kafka_offsets
from jobs.storage.progress import (
    DEDUP_STATE,
    JOIN_QUERY,
    batch_watermark,
    paced_counters,
    paced_entry,
    recent_progress,
    state_operators,
)
from jobs.storage.stream_runs import topics_read
from jobs.storage.tables import Tables

log = logging.getLogger("joinshift.health")

SIDES = ("left", "right")
DAY_S = 86_400
#: Progress lines read (the tail of the log): enough for an hour of one-minute triggers.
PROGRESS_LINES = 500
#: Micro-batches whose records feed the PT estimate.
PT_BATCHES = 16


@dataclass
class Check:
    """One value beside its threshold. ``kind`` says how to show both (count, bytes, duration
    in seconds, rate as a share); ``rule`` whether the value must stay at most (``max``) or at
    least (``min``) the threshold."""

    name: str
    stream: str | None
    value: float | None
    threshold: float
    kind: str
    rule: str = "max"
    status: str = "unknown"
    note: str = ""


@dataclass
class StreamHealth:
    pipeline: str
    taken_at: float
    status: str = "unknown"
    last_batch_id: int | None = None
    last_batch_at: float | None = None
    watermark: str | None = None
    pt: dict[str, str | None] = field(default_factory=dict)
    lag_source: str = "none"  # kafka | health log | none
    lag_sampled_at: float | None = None
    notes: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def check(self, name: str, stream: str | None = None) -> Check:
        return next(c for c in self.checks if c.name == name and c.stream == stream)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def _ts(iso: str | None) -> float | None:
    if not iso:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    return None


def batch_end(p: dict[str, Any]) -> float | None:
    """When a micro-batch ended (its start plus its trigger execution), epoch seconds."""
    start = _ts(p.get("timestamp"))
    dur = (p.get("durationMs") or {}).get("triggerExecution") or p.get("batchDuration") or 0
    return None if start is None else start + float(dur) / 1000


def _ops(p: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in p.get("stateOperators") or [] if isinstance(o, dict)]


def _recent(progress: list[dict[str, Any]], window_s: float) -> list[dict[str, Any]]:
    """The micro-batches that ended within ``window_s`` before the last one."""
    ends = [batch_end(p) for p in progress]
    known = [e for e in ends if e is not None]
    if not known:
        return []
    since = max(known) - window_s
    return [p for p, end in zip(progress, ends, strict=True) if end is not None and end >= since]


def late_drops(progress: list[dict[str, Any]], window_s: float) -> tuple[int, int, int]:
    """(rows dropped as late, input rows, micro-batches) over the batches that ended within
    ``window_s`` before the last one. Dropped as late: by the watermark (Spark's counter), or by
    the paced operator (its ``right_late_dropped``: Spark's counter is 0 there, the operator
    decides lateness itself)."""
    dropped = rows = n = 0
    for p in _recent(progress, window_s):
        n += 1
        rows += int(p.get("numInputRows") or 0)
        dropped += sum(int(o.get("numRowsDroppedByWatermark") or 0) for o in _ops(p))
        dropped += int(paced_counters(p).get("right_late_dropped") or 0)
    return dropped, rows, n


def duplicates_dropped(progress: list[dict[str, Any]], window_s: float) -> int:
    """Records the native engine's event-id de-duplication dropped (Spark's
    ``numDroppedDuplicateRows``) over the same micro-batches as :func:`late_drops`: what landing
    quarantines as ``duplicate_event_id``, counted for the stream too."""
    return sum(
        int((o.get("customMetrics") or {}).get("numDroppedDuplicateRows") or 0)
        for p in _recent(progress, window_s)
        for o in state_operators(_ops(p), DEDUP_STATE)
    )


def paced_counts(progress: list[dict[str, Any]], window_s: float) -> dict[str, int]:
    """The paced operator's counters (:data:`jobs.join.paced.METRICS`: late closes and drops,
    per-key cap closes and evictions, duplicates, amendments) summed over the same micro-batches
    as :func:`late_drops`; {} for the native engine."""
    out: dict[str, int] = {}
    for p in _recent(progress, window_s):
        for name, n in paced_counters(p).items():
            if name in METRICS:
                out[name] = out.get(name, 0) + int(n or 0)
    return {name: out[name] for name in METRICS if name in out}


def restarts_within(times: list[float], now: float, window_s: float = DAY_S) -> int:
    return sum(1 for t in times if now - window_s <= t <= now)


def lag_from_sample(sample: dict[str, Any]) -> tuple[dict[str, int | None], dict[str, float | None], float | None]:
    """Lag and oldest-unread age per stream, and when, from one health-log sample."""
    lag = {x: sample.get(f"lag_{x}") for x in SIDES}
    age = {x: sample.get(f"oldest_unread_age_{x}_s") for x in SIDES}
    return lag, age, _ts(sample.get("sampled_at"))


def pt_per_stream(event_ms: dict[str, list[np.ndarray]]) -> dict[str, float | None]:
    """Each stream's PT (epoch ms) from its micro-batches' event times, oldest batch first."""
    out: dict[str, float | None] = {}
    for side, batches in event_ms.items():
        est = PTEstimator()
        for b in batches:
            est.update(b)
        out[side] = est.pt
    return out


def _status(value: float | None, threshold: float, rule: str) -> str:
    if value is None:
        return "unknown"
    ok = value <= threshold if rule == "max" else value >= threshold
    return "ok" if ok else "warn"


# --------------------------------------------------------------------------------------------
# The pure core
# --------------------------------------------------------------------------------------------


def assess(
    spec: JoinSpec,
    progress: list[dict[str, Any]],
    *,
    now: float,
    lag: dict[str, int | None] | None = None,
    lag_age: dict[str, float | None] | None = None,
    lag_source: str = "none",
    lag_sampled_at: float | None = None,
    restarts: list[float] = (),  # type: ignore[assignment]
    pt_ms: dict[str, float | None] | None = None,
    notes: list[str] | None = None,
) -> StreamHealth:
    """The snapshot from the join's progress lines (oldest first), the lag per stream (records
    and oldest-unread age, s) and where it came from, the restart times and each stream's PT."""
    t = spec.health
    h = StreamHealth(spec.pipeline, now, lag_source=lag_source, lag_sampled_at=lag_sampled_at, notes=list(notes or []))
    lag, lag_age, pt_ms = lag or {}, lag_age or {}, pt_ms or {}
    last = progress[-1] if progress else None
    if last is None:
        h.notes.append("no micro-batch logged yet")
    else:
        h.last_batch_id = last.get("batchId")
        h.last_batch_at = batch_end(last)
        h.watermark = batch_watermark(last)
    wm_ms = (_ts(h.watermark) or 0) * 1000 if h.watermark else None
    h.pt = {x: _iso_ms(pt_ms.get(x)) for x in SIDES}

    def add(name: str, stream: str | None, value: float | None, threshold: float, kind: str, **kw: Any) -> Check:
        c = Check(name, stream, value, float(threshold), kind, **kw)
        c.status = _status(value, c.threshold, c.rule)
        h.checks.append(c)
        return c

    for x in SIDES:
        n = lag.get(x)
        add("lag_records", x, n, t.max_lag_records, "count")
        age = 0.0 if n == 0 else lag_age.get(x)
        add("lag_time", x, age, t.max_lag_time.total_seconds(), "duration")
    ops = _ops(last) if last else []
    rows = sum(int(o.get("numRowsTotal") or 0) for o in ops) if last else None
    mem = sum(int(o.get("memoryUsedBytes") or 0) for o in ops) if last else None
    add("state_rows", None, rows, t.max_state_rows, "count")
    add("state_bytes", None, mem, t.max_state_bytes, "bytes")

    age_s = None if h.last_batch_at is None else max(0.0, now - h.last_batch_at)
    c = add("batch_age", None, age_s, t.max_batch_age.total_seconds(), "duration")
    if c.status == "warn" and lag and all(lag.get(x) == 0 for x in SIDES):
        c.status, c.note = "ok", "idle: everything is read"  # Spark logs no progress when idle
    elif c.status == "warn":
        c.note = "records wait" if any((lag.get(x) or 0) > 0 for x in SIDES) else "lag unknown"

    add("restarts_24h", None, restarts_within(list(restarts), now), t.max_restarts_per_day, "count")

    dropped, inputs, batches = late_drops(progress, t.late_drop_window.total_seconds())
    c = add("late_drop_rate", None, dropped / inputs if inputs else None, t.max_late_drop_rate, "rate")
    if batches:
        c.note = f"{dropped} of {inputs} rows in {batches} micro-batches"
    elif last is not None:
        c.note = "no micro-batch in the window"
    dups = duplicates_dropped(progress, t.late_drop_window.total_seconds())
    if dups:  # the paced operator counts its own (left_duplicates, right_duplicates) below
        h.notes.append(f"duplicate event ids dropped over the same {batches} micro-batches: {dups:,}")
    paced = paced_counts(progress, t.late_drop_window.total_seconds())
    if paced:  # per-key caps and late closes are counted, never silent (paper §6.6)
        h.notes.append(
            f"paced operator over the same {batches} micro-batches: "
            + ", ".join(f"{name} {n:,}" for name, n in paced.items())
        )

    pacing = paced_entry(last) if last else None
    if pacing is not None:  # the paced engine: its watermark is the right PT, kept synchronized with the left's
        _pt_sync(spec, h, pacing, add)
    else:
        for x in SIDES:
            pt = pt_ms.get(x)
            margin = (pt - wm_ms) / 1000 if pt is not None and wm_ms is not None else None
            c = add("pt_margin", x, margin, t.min_pt_margin.total_seconds(), "duration", rule="min")
            if margin is None:
                c.note = "no watermark yet" if wm_ms is None else "PT unknown"

    statuses = {c.status for c in h.checks}
    h.status = "warn" if "warn" in statuses else "ok" if statuses == {"ok"} else "unknown"
    return h


def _pt_sync(spec: JoinSpec, h: StreamHealth, pacing: dict[str, Any], add: Callable[..., Check]) -> None:
    """The paced source's PTs (the ones its micro-batch ran with), and how far they are from the
    synchronization point ``left_PT + upper = right_PT`` (§5.2): past ``max_drift`` the left stream
    is paused, waiting for a right stream that is behind (an outage, a backfill)."""
    pts = {x: pacing.get(f"{x}_pt") for x in SIDES}
    known = {x: v for x, v in pts.items() if isinstance(v, int | float) and v >= 0}
    h.pt = {x: _iso_ms(known.get(x)) for x in SIDES}
    gap = (known["left"] + spec.window.upper_seconds * 1000 - known["right"]) / 1000 if len(known) == 2 else None
    c = add("pt_sync", None, gap, spec.streaming.paced.max_drift.total_seconds(), "duration")
    said = [f"{x} {what}" for what in ("paused", "idle") for x in pacing.get(what) or []]
    c.note = ", ".join(said) if gap is not None else "PT not known on both streams yet"


def _iso_ms(ms: float | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------
# The I/O shell
# --------------------------------------------------------------------------------------------


def batch_ranges(progress: list[dict[str, Any]], topic: str) -> list[dict[int, tuple[int, int]]]:
    """Per micro-batch (oldest first), ``{partition: (start, end)}`` it read of ``topic``."""
    out = []
    for p in progress:
        r: dict[int, tuple[int, int]] = {}
        for src in p.get("sources", []):
            start = kafka_offsets(src.get("startOffset")).get(topic, {})
            end = kafka_offsets(src.get("endOffset")).get(topic, {})
            for part, e in end.items():
                if part in start and e > start[part]:
                    r[part] = (start[part], e)
        out.append(r)
    return out


def _event_times(spec: JoinSpec, progress: list[dict[str, Any]], bootstrap: str, *, max_records: int, timeout_s: float):
    """Per stream, the event times (ms) of the records each of the latest micro-batches read."""
    out: dict[str, list[np.ndarray]] = {}
    recent = progress[-PT_BATCHES:]
    topics = topics_read(spec, progress[-1] if progress else None)
    for x in SIDES:
        st, topic = spec.side(x), topics[x]
        per_batch = batch_ranges(recent, topic)
        span: dict[int, tuple[int, int]] = {}
        for r in per_batch:
            for part, (s0, e0) in r.items():
                lo, hi = span.get(part, (s0, e0))
                span[part] = (min(lo, s0), max(hi, e0))
        got = kafka.read_ranges(bootstrap, {topic: span}, max_records=max_records, timeout_s=timeout_s)[topic]
        by_pos: dict[tuple[int, int], Any] = {}
        avro = st.format.avro if st.format.encoding == Encoding.avro else None
        for part, off, value in got:
            text = decode_or_why(value, avro)[0] if avro is not None else value  # Avro: its record's JSON
            if text is None:  # an Avro value that does not decode
                continue
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                by_pos[(part, off)] = json.loads(text).get(st.event_time)
        batches = []
        for r in per_batch:
            raw = [by_pos[(p, o)] for p, (s0, e0) in r.items() for o in range(s0, e0) if (p, o) in by_pos]
            ts = pd.to_datetime(pd.Series(raw, dtype="object"), utc=True, errors="coerce", format="ISO8601")
            ms = ((ts.dropna() - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)).to_numpy()
            if ms.size:
                batches.append(ms.astype(np.float64))
        out[x] = batches
    return out


def read_restarts(spec: JoinSpec, s: Settings | None = None) -> list[float]:
    """Restart times (epoch s) the supervisor logged."""
    p = restart_log(spec, s)
    out = []
    if p.exists():
        for line in p.read_text().splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                t = _ts(json.loads(line).get("at"))
                if t is not None:
                    out.append(t)
    return out


def last_sample(spec: JoinSpec, s: Settings | None = None) -> dict[str, Any] | None:
    """The health log's last sample with a lag (the supervisor's last look at Kafka)."""
    p = health_log(spec, s)
    if not p.exists():
        return None
    for line in reversed(p.read_text().splitlines()[-200:]):
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and (rec.get("lag_left") is not None or rec.get("lag_right") is not None):
                return rec
    return None


def snapshot(
    spec: JoinSpec,
    s: Settings | None = None,
    *,
    now: float | None = None,
    bootstrap: str | None = None,
    kafka_timeout_s: float = 2.0,
    pt_max_records: int = 20_000,
) -> StreamHealth:
    """The pipeline's stream health now: progress log, Kafka (short timeouts), the supervisor's
    health and restart logs. Never raises for a missing file or an unreachable broker."""
    now = time.time() if now is None else now
    progress = recent_progress(Tables.of(spec, s).progress_log(JOIN_QUERY), PROGRESS_LINES)
    notes: list[str] = []
    lag = age = pt = None
    source, sampled = "none", None
    try:
        bootstrap = bootstrap or kafka.bootstrap_servers(s)
        if progress:
            lag, age = kafka_lag(spec, progress[-1], bootstrap, now=now, timeout_s=kafka_timeout_s)
            source, sampled = "kafka", now
            if spec.streaming.engine != Engine.paced:  # the paced source logs the PTs it runs with
                times = _event_times(spec, progress, bootstrap, max_records=pt_max_records, timeout_s=kafka_timeout_s)
                pt = pt_per_stream(times)
    except Exception as e:  # no route to the broker from here: the supervisor's last look
        log.info("stream health of %s without Kafka: %s", spec.pipeline, e)
        sample = last_sample(spec, s)
        if sample is not None:
            lag, age, sampled = lag_from_sample(sample)
            source = "health log"
            notes.append(f"Kafka not reachable from here ({type(e).__name__}): lag as the supervisor last recorded it")
        else:
            notes.append(f"Kafka not reachable from here ({type(e).__name__}) and no health sample: lag unknown")
        if spec.streaming.engine != Engine.paced:
            notes.append("PT unknown without Kafka (it is estimated from the records' event times)")
    return assess(
        spec,
        progress,
        now=now,
        lag=lag,
        lag_age=age,
        lag_source=source,
        lag_sampled_at=sampled,
        restarts=read_restarts(spec, s),
        pt_ms=pt,
        notes=notes,
    )
