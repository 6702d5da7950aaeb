"""How the stream output of each ds was produced: the provenance of a stream match rate.

A stream's match rate depends on how its arrivals were cut into micro-batches. Three kinds:

* ``replay-as-live``: ``joinshift replay-as-live`` admitted the arrivals slice by slice of record
  time, one micro-batch per slice: the rate a live stream would have had (``slices``,
  ``slice_minutes`` recorded);
* ``live``: an increment that found at most :data:`LIVE_BACKLOG_INTERVALS` trigger intervals of
  arrivals waiting (the stream keeps up, as it would in production);
* ``backlog``: an increment that found more waiting: its micro-batches each cover more arrival
  time than live ones would, so the watermark fires late and the rate is an **upper bound**.

One JSON file per pipeline (``<storage_root>/stream_runs/<pipeline>.json``), ds -> the last
run that wrote that ds's stream output. A ds with no record has an unknown provenance.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime
from typing import Any

from jobs.settings import Settings, settings
from jobs.spec import JoinSpec
from jobs.storage import fs
from jobs.storage.checkpoints import kafka_offsets

REPLAY_AS_LIVE, LIVE, BACKLOG = "replay-as-live", "live", "backlog"
#: More than this many trigger intervals of arrivals waiting when an increment starts: a backlog run.
LIVE_BACKLOG_INTERVALS = 2


def replay_topics(spec: JoinSpec) -> dict[str, str]:
    """The topics a pipeline's replay-as-live publishes into (and its trial stream reads), by side."""
    return {side: f"joinshift-replay.{spec.pipeline}.{side}" for side in ("left", "right")}


def topics_read(spec: JoinSpec, progress: dict[str, Any] | None) -> dict[str, str]:
    """By side, the topic the stream whose micro-batch this is actually read: the spec's topic,
    or the replay topic when the stream ran as a replay-as-live trial. Without a micro-batch
    that names either, the spec's topics."""
    read: set[str] = set()
    for src in (progress or {}).get("sources", []):
        read.update(kafka_offsets(src.get("endOffset")))
    replay = replay_topics(spec)
    return {
        side: replay[side] if replay[side] in read and spec.side(side).topic not in read else spec.side(side).topic
        for side in ("left", "right")
    }


def runs_file(spec: JoinSpec, s: Settings | None = None) -> str:
    return (s or settings()).path("stream_runs", f"{spec.pipeline}.json")


def read_runs(spec: JoinSpec, s: Settings | None = None) -> dict[str, dict[str, Any]]:
    """``{ds (ISO): run record}`` for every ds whose stream output has a recorded provenance."""
    try:
        return dict(json.loads(fs.read_text(runs_file(spec, s))))
    except (OSError, ValueError):
        return {}


def run_of(spec: JoinSpec, ds: date | str, s: Settings | None = None) -> dict[str, Any] | None:
    """The run that produced the stream output of ``ds`` (None: unknown)."""
    return read_runs(spec, s).get(str(ds))


def record_run(
    spec: JoinSpec,
    days: list[date] | list[str],
    kind: str,
    *,
    slices: int | None = None,
    slice_minutes: float | None = None,
    replace: bool = False,
    s: Settings | None = None,
) -> None:
    """Record that a run of ``kind`` produced (part of) the stream output of ``days``.

    A backlog run taints a ds for good (any part of it read in large batches makes its rate an
    upper bound) until a fresh run (``replace=True``: replay-as-live rewrites the whole output)
    records over it; a live increment does not clear a backlog mark.
    """
    if kind not in (REPLAY_AS_LIVE, LIVE, BACKLOG):
        raise ValueError(f"kind must be {REPLAY_AS_LIVE}, {LIVE} or {BACKLOG}, not {kind!r}")
    runs = {} if replace else read_runs(spec, s)
    at = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="seconds")
    for d in days:
        if kind == LIVE and runs.get(str(d), {}).get("kind") == BACKLOG:
            continue
        rec: dict[str, Any] = {"kind": kind, "recorded_at": at}
        if kind == REPLAY_AS_LIVE:
            rec |= {"slices": slices, "slice_minutes": slice_minutes}
        runs[str(d)] = rec
    fs.write_text(runs_file(spec, s), json.dumps(runs, indent=1, sort_keys=True) + "\n")


def rate_label(run: dict[str, Any] | None) -> str:
    """How to read a stream rate: "" for live or unknown, else a short label shown beside it."""
    if not run:
        return ""
    if run.get("kind") == BACKLOG:
        return "upper bound (backlog run)"
    if run.get("kind") == REPLAY_AS_LIVE:
        minutes = run.get("slice_minutes")
        size = f"{minutes:g}m" if isinstance(minutes, int | float) else "?"
        return f"replay-as-live ({size} slices)"
    return ""
