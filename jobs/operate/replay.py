"""Rebuild the streaming join's window by replaying Kafka into a fresh checkpoint (paper §6.1).

Used after a change ``joinshift plan`` says needs a fresh checkpoint (window, keys, join type,
schema), after an outage, or when a checkpoint is broken. From the cut-over instant on, the new
run owns the output:

* each stream is read from where a live run's state at the cut-over reaches back to (arrival
  time, :func:`replay_start`), found per partition with Kafka's offsets-for-times, so the join
  state at the cut-over is complete;
* before replaying, every partition must still retain that start: offsets-for-times quietly
  answers with the earliest retained record when the asked time is older, so the timestamps are
  compared, and a gap fails with the alternative (rebuild from the landed Delta tables);
* the old checkpoint is kept (moved to ``<checkpoint>.bak-<UTC>``), never deleted;
* the replay holds the pipeline (:func:`jobs.supervisor.hold`): it stops the supervised stream
  process, and supervisors and scheduled increments keep off the checkpoint until it is done;
* output is exactly once across the switch: the old run owns the left events it read (its
  checkpoint's last committed offsets) that arrived before the cut-over, the new run every other
  (:class:`~jobs.join.conditions.Handover`). A left event that arrived before the cut-over but
  after the old run's last micro-batch (an outage that began earlier than thought) is the new
  run's: the replay reads the left stream from the old run's offsets at the latest, and the state
  reaches back from that event's arrival when it is older than the cut-over. So is a left event
  whose window the old run still held open when it stopped (event time after its last watermark
  less the window's upper bound, ``handover.open_from``; the native engine): the old run would
  write none of its rows from then on, and the state reaches back from the oldest of them. (The
  paced engine's buffers follow its PTs: with it, pick a cut-over a window span and the larger
  delay before the stop. A replay run again after a failure reads the handover its first run
  recorded in the checkpoint it was building: :data:`HANDOVER_RECORD`.) The old run's events are
  not written (they pass the watermark and the de-duplication, so a re-send is still dropped, but
  stay out of the join: no state, no pairs to compute and throw away); the new run's go through an
  insert-only MERGE keyed by (left id, right id), so rows the old run already wrote are not
  written again and rows it never wrote are. Delta's streaming-sink idempotence (keyed by the
  query id, which a fresh checkpoint changes) would not protect this switch. Without an old
  checkpoint that read the left topic (none, one that cannot be read, one of other topics),
  ownership is by arrival alone: the plan's ``handover`` says so;
* the catch-up's last micro-batch, one with no data, would only evict by the watermark the data
  reached (a scan of the whole rebuilt state) and write the non-matches that closes. When the
  output holds no row of a left event from the cut-over on (the old run stopped before it, or
  there was none), the native engine skips it: the watermark is in the checkpoint's commit log,
  and the live run's first micro-batch with data evicts by it in its own scan and appends those
  non-matches, which nobody wrote before. When the old run ran past the cut-over, its last
  micro-batches closed some of them already, and they go through the replay's MERGE as before.

    joinshift replay --spec include/specs/search_sessions.yaml --cutover 2026-11-20T06:00:00Z
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pyspark.sql import functions as F

from jobs.join.columns import ARRIVAL_TIME, col_name
from jobs.join.conditions import Handover
from jobs.operate.checkpoint import backup_path
from jobs.operate.process import stop_stream_process
from jobs.settings import Settings, settings
from jobs.spec import Engine, JoinSpec
from jobs.steps.stream import start_streaming_join
from jobs.storage import delta_io, fs, kafka
from jobs.storage.checkpoints import CheckpointError, committed_offsets
from jobs.storage.hold import current_hold, hold, stream_owner
from jobs.storage.kafka import RetentionGap
from jobs.storage.progress import JOIN_QUERY, settle_log
from jobs.storage.spark import NO_DATA_BATCHES, conf_for
from jobs.storage.tables import Tables

__all__ = ["RetentionGap", "ReplayPlan", "parse_cutover", "plan_replay", "replay", "replay_start", "written_from"]

log = logging.getLogger("joinshift.replay")


@dataclass
class ReplayPlan:
    cutover: str
    starts: dict[str, str]  # topic -> replay start (arrival time, ISO)
    offsets: dict[str, dict[str, int]]  # topic -> partition -> starting offset
    checkpoint: str
    # what the old run hands over (module docstring): its left offsets ("read_to"; absent: by arrival
    # alone, "note" says why), the left records it had not read and the oldest one's arrival
    handover: dict[str, Any] = field(default_factory=dict)
    backup: str | None = None
    stopped_pid: int | None = None  # the supervised stream process the replay stopped
    # whether the catch-up ended with a micro-batch without data (module docstring)
    closing_batch: bool = True


def replay_start(spec: JoinSpec, side: str, cutover: datetime) -> datetime:
    """Where a side's replay starts (arrival time): what a live run holds at the cut-over.

    Spark's watermark is the smaller of the two streams' event-time fronts less their delays, so
    at the cut-over it trails by the larger delay: a left event arriving after it may be that old,
    and the join holds every right event it can still match, back to that watermark + the
    window's lower bound. The left events before the cut-over stay out of the join (the old
    run's), so the left side needs only their ids, for the de-duplication: back to the watermark.
    An event arrives no earlier than its event time, so these are arrival times too. (Reading
    from cut-over − window span − the side's own delay missed right events whenever the left
    delay is over the right's + the window's upper bound, and read more than needed otherwise.)
    A stream that stopped before the cut-over holds the watermark further back: pick a cut-over
    after both run again.

    The paced engine's state follows its streams' PTs, not the watermark delays: it is read from
    cut-over − window span − the side's delay, as before."""
    if spec.streaming.engine == Engine.paced:
        return cutover - timedelta(seconds=spec.window.span_seconds) - spec.side(side).watermark_delay
    watermark = cutover - max(spec.left.watermark_delay, spec.right.watermark_delay)
    return watermark + min(spec.window.lower, timedelta(0)) if side == "right" else watermark


def plan_replay(spec: JoinSpec, cutover: datetime, bootstrap: str, s: Settings | None = None) -> ReplayPlan:
    """Where each stream's replay starts, and what the old run hands over (module docstring);
    :class:`RetentionGap` when Kafka no longer holds either."""
    return _plan(spec, cutover, bootstrap, s, resumed=_resuming(spec, s))[0]


#: How a replay names its hold (a replay-as-live trial holds the pipeline too).
HOLD_REASON = "replay from cut-over"


def _resuming(spec: JoinSpec, s: Settings | None) -> bool:
    """Whether a replay failed part-way under its hold: the checkpoint in place is its half-built one."""
    earlier = current_hold(spec, s)
    return bool(earlier and earlier.get("failed") and str(earlier.get("reason", "")).startswith(HOLD_REASON))


def _plan(
    spec: JoinSpec, cutover: datetime, bootstrap: str, s: Settings | None, *, resumed: bool = False
) -> tuple[ReplayPlan, Handover]:
    checkpoint = Tables.of(spec, s).checkpoint(JOIN_QUERY)
    handover, said = old_run_handover(spec, checkpoint, cutover, bootstrap, resumed=resumed)
    # the state must be complete for the oldest left event the new run owns: the oldest it reads
    # that the old run had not, and the oldest whose window the old run held open
    first = min([cutover, *(datetime.fromisoformat(said[k]) for k in ("oldest_unread", "open_from") if said.get(k))])
    starts, offsets = {}, {}
    for side in ("left", "right"):
        st = spec.side(side)
        start = replay_start(spec, side, first)
        starts[st.topic] = start.isoformat()
        offsets[st.topic] = kafka.offsets_for_time(bootstrap, st.topic, start)
    for p, o in (handover.read_to or {}).items():  # what the old run had not read, read whatever its stamp
        offsets[spec.left.topic][str(p)] = min(o, offsets[spec.left.topic].get(str(p), o))
    return ReplayPlan(cutover.isoformat(), starts, offsets, checkpoint, handover=said), handover


#: What a replay records in the checkpoint it builds, before it starts: the old run's handover
#: (``read_to`` or ``note``), which a replay run again after a failure reads there (the old run's
#: checkpoint is then a backup, and the one in its place the failed replay's, half-built).
HANDOVER_RECORD = "joinshift_handover.json"


def old_run_handover(
    spec: JoinSpec, checkpoint: str, cutover: datetime, bootstrap: str, *, resumed: bool = False
) -> tuple[Handover, dict[str, Any]]:
    """What the new run owns (:class:`Handover`), from the old checkpoint's last committed left
    offsets (``resumed``: as the failed replay this one runs again recorded them), and the plan's
    account of it. :class:`RetentionGap` when Kafka deleted left records the old run had not
    read: nobody wrote them, and no cut-over brings them back."""
    topic = spec.left.topic
    recorded = _recorded_handover(checkpoint) if resumed else None
    if recorded is not None and "read_to" not in recorded:
        return Handover(cutover), {"note": recorded.get("note", "ownership by arrival alone")}
    ends = kafka.end_offsets(bootstrap, [topic])[topic]
    if recorded is not None:
        read_to, watermark = {int(p): o for p, o in recorded["read_to"].items()}, recorded.get("old_watermark")
    else:
        try:
            committed = committed_offsets(checkpoint)
        except CheckpointError as e:
            return Handover(cutover), {"note": f"the old checkpoint cannot be read ({e}): ownership by arrival alone"}
        if not committed or topic not in committed[0]:
            why = "no old checkpoint" if committed is None else f"the old checkpoint committed no read of {topic}"
            return Handover(cutover), {"note": f"{why}: ownership by arrival alone"}
        read_to, wm = committed[0][topic], committed[1]
        watermark = datetime.fromtimestamp(wm / 1000, UTC).isoformat() if wm else None
        if past := {p: o for p, o in read_to.items() if o > ends.get(p, 0)}:  # the topic was made again since
            note = f"the old checkpoint read {topic} past its end ({past}): ownership by arrival alone"
            return Handover(cutover), {"note": note}
        read_to = {p: read_to.get(p, 0) for p in sorted({*read_to, *ends})}  # a partition it never read: from 0
    held = kafka.end_offsets(bootstrap, [topic], beginning=True)[topic]
    if gone := {p: (o, held[p]) for p, o in sorted(read_to.items()) if o < held.get(p, 0)}:
        raise RetentionGap(
            f"{topic}: the old run had not read "
            + ", ".join(f"partition {p} from offset {o} (Kafka holds it from {h} on)" for p, (o, h) in gone.items())
            + ": nobody wrote those left events. Land their days and run the batch join for them, then move the "
            "old checkpoint aside (ownership is then by arrival alone) and replay"
        )
    unread = kafka.lag({topic: read_to}, {topic: ends})
    oldest = kafka.oldest_unread(bootstrap, {topic: read_to}, {topic: ends}).get(topic)
    if unread and oldest is None:  # where the state must reach back to is unknown
        raise kafka.KafkaUnavailable(f"{topic}: the old run's first unread record did not come from {bootstrap}; retry")
    # the native engine's left rows the old run still held, their windows open (the paced engine's
    # buffers follow its PTs, not a watermark: by offsets and arrival alone)
    open_from = None
    if watermark and spec.streaming.engine != Engine.paced:
        open_from = datetime.fromisoformat(watermark) - spec.window.upper
    return Handover(cutover, read_to, open_from), {
        "read_to": {str(p): o for p, o in sorted(read_to.items())},
        "unread": unread,
        "oldest_unread": datetime.fromtimestamp(oldest / 1000, UTC).isoformat() if oldest is not None else None,
        "old_watermark": watermark,
        "open_from": open_from.isoformat() if open_from is not None else None,
    }


def _recorded_handover(checkpoint: str) -> dict[str, Any] | None:
    try:
        return json.loads(fs.read_text(fs.join(checkpoint, HANDOVER_RECORD)))
    except (FileNotFoundError, ValueError):
        return None


def backup_and_clear(checkpoint: str) -> str | None:
    """Move the old checkpoint aside (kept, never deleted); the replay starts a fresh one."""
    if not fs.exists(checkpoint):
        return None
    dest = backup_path(checkpoint)
    fs.rename(checkpoint, dest)
    log.info("kept the old checkpoint as %s", dest)
    return str(dest)


def replay(spark, spec: JoinSpec, cutover: datetime, *, bootstrap: str, s: Settings | None = None) -> ReplayPlan:
    """Plan (retention check included), then under a hold on the pipeline (supervisors and
    scheduled increments keep off its checkpoint): stop the supervised stream process, back up
    the checkpoint, and catch up from the replay start. The next supervisor check starts the
    stream again from the new checkpoint."""
    resumed = _resuming(spec, s)  # read before the hold takes the failed one over
    _plan(spec, cutover, bootstrap, s, resumed=resumed)  # Kafka's retention, before anything stops
    with hold(spec, s, reason=f"{HOLD_REASON} {cutover.isoformat()}") as held:
        held.at_risk = False  # until the checkpoint moves, a failure leaves the pipeline as it was
        stopped = stop_stream_process(spec, s)
        # an increment still running refuses the replay before the checkpoint moves
        with stream_owner(spec, s, role="replay"):
            # the handover from where the stopped run got to
            plan, handover = _plan(spec, cutover, bootstrap, s, resumed=resumed)
            plan.stopped_pid = stopped
            held.at_risk = True
            plan.backup = backup_and_clear(plan.checkpoint)
            fs.write_text(fs.join(plan.checkpoint, HANDOVER_RECORD), json.dumps(plan.handover))
            plan.closing_batch = _ends_with_closing_batch(spark, spec, cutover, s)
            with conf_for(spark, {} if plan.closing_batch else {NO_DATA_BATCHES: "false"}):
                (q,) = start_streaming_join(
                    spark,
                    spec,
                    bootstrap=bootstrap,
                    s=s,
                    available_now=True,
                    quarantine=False,
                    starting_offsets=plan.offsets,
                    owned_from=handover,
                )
                q.awaitTermination()
            settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)  # the checkpoint's query, on record
    log.info("replay of %s from cut-over %s done", spec.pipeline, cutover.isoformat())
    return plan


def _ends_with_closing_batch(spark, spec: JoinSpec, cutover: datetime, s: Settings | None) -> bool:
    """Whether the catch-up ends with a micro-batch without data (module docstring): a user's
    ``spark_conf`` decides; else always with the paced engine, and with the native one when the
    output holds a row from the cut-over on."""
    users = (s or settings()).spark_conf.get(NO_DATA_BATCHES)
    if users is not None:
        return users.strip().lower() == "true"
    return spec.streaming.engine == Engine.paced or written_from(spark, spec, cutover, s)


def written_from(spark, spec: JoinSpec, cutover: datetime, s: Settings | None = None) -> bool:
    """Whether the stream's output holds a row of a left event that arrived at or after ``cutover``.
    Reads the ds partitions from the cut-over's on: a row's ds is its left event's arrival date."""
    path = Tables.of(spec, s).output("stream")
    if not delta_io.table_exists(spark, path):
        return False
    first_ds = cutover.astimezone(ZoneInfo(spec.timezone)).date()
    arrived = F.col(col_name("left", ARRIVAL_TIME))
    rows = spark.read.format("delta").load(path).where((F.col("ds") >= F.lit(first_ds)) & (arrived >= F.lit(cutover)))
    return not rows.isEmpty()


def parse_cutover(text: str) -> datetime:
    """An ISO-8601 instant (``Z`` or an offset; naive means UTC)."""
    try:
        cutover = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"cutover: {text!r} is not an ISO-8601 instant (e.g. 2026-11-20T06:00:00Z)") from None
    return cutover if cutover.tzinfo else cutover.replace(tzinfo=UTC)
