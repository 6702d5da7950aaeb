"""The progress log: every micro-batch's progress as a JSON line, written as it happens.

Restart tooling, attribution, recommendation and reports read it (rates, state rows and memory,
watermark, rows dropped by the watermark, source offsets per batch). It lives under the storage
root, so it is read and written through ``jobs.storage.fs`` (on an object store each line rewrites
the object: fine for a trial's or a day's batches, see README "Storage on an object store").
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from jobs.storage import fs
from jobs.storage.checkpoints import kafka_offsets

log = logging.getLogger("joinshift.progress")

#: The streaming queries of a pipeline, by name (each has its checkpoint and progress log).
JOIN_QUERY, QUARANTINE_QUERY = "stream_join", "stream_quarantine"


def query_name(pipeline: str, query: str) -> str:
    """The running query's name: the pipeline's own, so that several pipelines in one process
    (Airflow tasks, the tests) neither clash (Spark refuses two active queries of one name) nor
    log each other's progress."""
    return f"{pipeline}.{query}"


_LOG_LOCK = threading.Lock()
#: run id -> the last batch id of that run on record (a run writes one log): the listener and
#: :func:`settle_log` both write a batch, whichever comes first; the other one skips it.
_LOGGED: dict[str, int] = {}


#: Where a progress line holds what the query's own code noted (:func:`note_batch`).
NOTES_KEY = "joinshift"
#: (query name, batch id) -> what the query's own code noted about that micro-batch (the paced
#: engine's counters), logged with its progress under :data:`NOTES_KEY`.
_NOTES: dict[tuple[str, int], dict[str, Any]] = {}


def note_batch(query: str, batch_id: int, notes: dict[str, Any]) -> None:
    """Log ``notes`` with the progress of micro-batch ``batch_id`` of the running query ``query``
    (called from its sink, before the batch ends)."""
    with _LOG_LOCK:
        _NOTES.setdefault((query, batch_id), {}).update(notes)


def _log_once(path: str, progress: dict[str, Any], progress_json: str) -> None:
    """Append one micro-batch's progress (Spark's JSON text of it, and that text parsed) to the
    log, unless on record."""
    run, batch = str(progress["runId"]), int(progress["batchId"])
    with _LOG_LOCK:
        if _LOGGED.get(run, -1) >= batch:
            return
        notes = _NOTES.pop((progress.get("name") or "", batch), None)
        line = json.dumps({**progress, NOTES_KEY: notes}) if notes else progress_json.replace("\n", " ")
        fs.append_text(path, line + "\n")
        _LOGGED[run] = batch


class ProgressRecorder:
    """Appends every micro-batch's progress as a JSON line to the log of its query.

    A py4j proxy of Spark's Python listener interface, called back on Spark's event bus. It asks
    the JVM for an event's progress as JSON text, two calls; pyspark's own listener first builds the
    whole event object: dozens of calls per micro-batch, and each Java map it converts ends on a
    Java exception that pyspark checks against 14 exception classes, each check a class lookup
    through every jar on the class path (490 ms of CPU per micro-batch against 2 ms, BENCHMARKS)."""

    def __init__(self, paths: dict[str, str] | None = None):
        self._paths = dict(paths or {})  # query name (:func:`query_name`) -> jsonl path

    def route(self, paths: dict[str, str]) -> None:
        """Log these queries here from now on (a query name's latest route wins: Spark runs one
        query of a name at a time, and a finished run's late events were settled already)."""
        self._paths.update(paths)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's callback names)
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        progress_json = event.progress().json()
        progress = json.loads(progress_json)
        path = self._paths.get(progress.get("name") or "")
        if path:
            _log_once(path, progress, progress_json)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        exception = event.exception()
        if exception.isDefined():
            log.error("streaming query %s failed: %s", event.id().toString(), exception.get())

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


#: id(session) -> its recorder and the JVM's wrapper of it on the session's listener bus.
_RECORDERS: dict[int, tuple[ProgressRecorder, Any]] = {}


def ensure_recorder(spark: SparkSession, paths: dict[str, str]) -> None:
    """One listener per session, however many pipelines and queries it (re)starts: every
    listener is called back (over py4j) on every event of the session, so one per pipeline made a
    long-lived process's event bus, and its logs, fall behind."""
    if id(spark) not in _RECORDERS:
        from pyspark.java_gateway import ensure_callback_server_started

        sc = spark.sparkContext
        ensure_callback_server_started(sc._gateway)
        recorder = ProgressRecorder()
        wrapper = sc._jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(recorder)  # type: ignore[union-attr]
        spark._jsparkSession.streams().addListener(wrapper)
        _RECORDERS[id(spark)] = (recorder, wrapper)
    _RECORDERS[id(spark)][0].route(paths)


def remove_recorders(spark: SparkSession) -> None:
    """Take the session's listeners off its bus (before the session stops): a Python listener
    left on it is called back after the Python side closed, which Spark logs as
    ``ERROR StreamingQueryListenerBus ... Py4JException`` at the end of a run that succeeded."""
    if id(spark) in _RECORDERS:
        _, wrapper = _RECORDERS.pop(id(spark))
        with contextlib.suppress(Exception):
            spark._jsparkSession.streams().removeListener(wrapper)


def read_progress(path: str) -> list[dict[str, Any]]:
    """Every micro-batch's progress in a log, oldest first ([] when there is none yet)."""
    try:
        text = fs.read_text(path)
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def last_progress(path: str) -> dict[str, Any] | None:
    """The last complete line of a progress log (cheap: reads the file's tail)."""
    try:
        lines = fs.read_bytes(path, tail=256_000).splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            return json.loads(line)
    return None


def recent_progress(path: str, n: int, tail_bytes: int = 4_000_000) -> list[dict[str, Any]]:
    """The last ``n`` complete lines of a progress log, oldest first (reads at most the file's
    last ``tail_bytes``: a page or a health check must not read a week of batches)."""
    try:
        lines = fs.read_bytes(path, tail=tail_bytes).splitlines()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in reversed(lines):
        if len(out) >= n:
            break
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out[::-1]


def settle_log(path: str, query: Any) -> None:
    """Put ``query``'s batches the listener has not written yet on record at ``path``, from the
    query's own recent progress. The listener runs on Spark's event bus, asynchronously and, on a
    busy driver, many seconds behind; whoever reads the log next (a checkpoint validation, the
    watermark's drop count, the next increment's lag) must see every batch the query ran."""
    recent = query.recentProgress
    if not recent:
        return
    with _LOG_LOCK:
        done = _LOGGED.get(str(recent[-1]["runId"]), -1)
    if done < int(recent[0]["batchId"]) - 1:  # the listener is more batches behind than Spark keeps
        log.warning(
            "the progress log %s misses batches %s to %s of %s", path, done + 1, recent[0]["batchId"] - 1, query.name
        )
    for p in recent:
        _log_once(path, json.loads(p.json), p.json)


def _end_offset(source: dict[str, Any]) -> dict[str, Any]:
    """A source's end offset in a progress line (Spark writes it as JSON text)."""
    end = source.get("endOffset") or {}
    return json.loads(end) if isinstance(end, str) else end


def end_offsets_read(progress: dict[str, Any]) -> dict[str, dict[int, int]]:
    """``{topic: {partition: offset}}`` a micro-batch read up to (its sources' end offsets)."""
    done: dict[str, dict[int, int]] = {}
    for src in progress.get("sources", []):
        for topic, parts in kafka_offsets(src.get("endOffset")).items():
            done.setdefault(topic, {}).update(parts)
    return done


def paced_entry(progress: dict[str, Any]) -> dict[str, Any] | None:
    """A paced micro-batch's own entry in its end offset (the PTs it ran with, what was paused:
    :mod:`jobs.storage.aligned_source`), or None for the native engine's."""
    for src in progress.get("sources", []):
        end = _end_offset(src)
        if "@paced" in end:
            return end["@paced"]
    return None


def paced_counters(progress: dict[str, Any]) -> dict[str, Any]:
    """A paced micro-batch's operator counters as its sink noted them (``note_batch(..., {"paced":
    counts})``), or {} for the native engine's."""
    return (progress.get(NOTES_KEY) or {}).get("paced") or {}


def batch_watermark_ms(progress: dict[str, Any]) -> int | None:
    """What a micro-batch's windows closed by (epoch ms): Spark's event-time watermark, or for the
    paced engine (which has none) the right PT it ran with; None before there is one."""
    paced = paced_entry(progress)
    if paced is not None:
        rpt = int(paced.get("right_pt", -1))
        return rpt if rpt >= 0 else None
    wm = (progress.get("eventTime") or {}).get("watermark")
    return int(datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() * 1000) if wm else None


def batch_watermark(progress: dict[str, Any]) -> str | None:
    """:func:`batch_watermark_ms` as Spark writes a watermark (ISO, ms, ``Z``)."""
    if paced_entry(progress) is None:
        return (progress.get("eventTime") or {}).get("watermark")
    ms = batch_watermark_ms(progress)
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def watermark_ms(progress: list[dict[str, Any]]) -> int | None:
    """The latest watermark (epoch ms) in a progress log (:func:`batch_watermark_ms`)."""
    for p in reversed(progress):
        ms = batch_watermark_ms(p)
        if ms is not None:
            return ms
    return None


#: State operators by what their name holds, in a progress line's ``stateOperators`` and in the
#: checkpoint's ``state-metadata`` alike: the stream-stream join (``symmetricHashJoin``), the
#: event-id de-duplication per side (``dedupeWithinWatermark``), the paced engine's operator.
JOIN_STATE, DEDUP_STATE, PACED_STATE = "join", "dedupe", "transformwithstate"


def state_operators(operators: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The operators of one kind (:data:`JOIN_STATE`, :data:`DEDUP_STATE`, :data:`PACED_STATE`)."""
    return [op for op in operators if kind in str(op.get("operatorName", "")).lower()]
