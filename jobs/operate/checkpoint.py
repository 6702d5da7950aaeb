"""Look inside the streaming join's checkpoint: where it is, whether it is healthy, how far behind.

A Structured Streaming checkpoint is a folder::

    metadata                 {"id": "<query id>"}: the query's identity across restarts
    offsets/<batch>          the write-ahead log: "v1", a metadata JSON line (batchWatermarkMs,
                             batchTimestampMs, conf incl. spark.sql.shuffle.partitions), then one JSON
                             line per source, e.g. {"search_clicks": {"0": 12, "1": 9}} (the offsets the
                             batch reads *up to*, i.e. the next offset to read), "-" for none yet
    commits/<batch>          "v1" and {"nextBatchWatermarkMs": ...}: the batch is done (sink written)
    sources/<i>/0            each Kafka source's starting offsets
    state/<op>/<partition>/<store>/   the join's state (RocksDB: <version>.changelog / <version>.zip,
                             version = batch + 1), stores left-/right-keyToNumValues and
                             left-/right-keyWithIndexToValue; state/<op>/_metadata: operator metadata
    state/<op>/<partition>/  the per-side event-id de-duplication before the join: one default
                             store, its files directly in the partition folder

Three tools, none of which ever deletes or rewrites anything:

* :func:`inspect_checkpoint`: last committed / planned batch, committed offsets per topic-partition,
  the query id, Kafka lag per partition (if a broker is given), state rows and bytes per join side.
* :func:`validate_checkpoint`: what is broken (missing metadata, corrupt or truncated log files, a
  commit without offsets, state missing for committed batches, a checkpoint of another query or
  other topics), each with what to do (in :mod:`jobs.operate.checkpoint_validate`).
* :func:`backup_checkpoint`: a full copy next to it, ``<path>.bak-<UTC timestamp>``.

CLI::

    joinshift checkpoint inspect  [--json]
    joinshift checkpoint validate [--json]   # exit 1 if broken
    joinshift checkpoint backup
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.operate.checkpoint_validate import SIDES, _fmt, _offsets_conf, validate_checkpoint
from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.storage import fs
from jobs.storage.checkpoints import (
    STATE_STORE_PROVIDER,
    CheckpointError,
    read_log_file,
    source_offsets,
    state_store_name,
)
from jobs.storage.progress import JOIN_STATE, PACED_STATE, state_operators

log = logging.getLogger("joinshift.checkpoint")

#: How the bytes of the state are measured (also returned by inspect).
STATE_BYTES_NOTE = (
    "rows: rows the state data source returns for the side (format 'statestore', option joinSide) at the "
    "last committed batch; json_bytes: sum over those rows of octet_length(to_json(key)) + "
    "octet_length(to_json(value)) (the value without the join's internal 'matched' flag), a proxy for "
    "the logical size of the buffered rows (not RocksDB's encoded, compressed size); disk_bytes: size of "
    "the side's store files under state/ (changelogs and snapshots of every retained version, so an upper "
    "bound of what a restart reads)."
)
#: How the paced operator's state is measured (also returned by inspect).
PACED_STATE_NOTE = (
    "keys: join keys holding buffers (the paced operator's map state 'buffers', format 'statestore', option "
    "stateVarName) at the last committed batch; events: their buffered left and right events and non-matches "
    "still amendable; raw_bytes: the buffers pickled; stored_bytes: as stored (zstandard, with the run's "
    "dictionary); disk_bytes: size of the operator's store files under state/ (every retained version)."
)


# ------------------------------------------------------------------------------- inspect


def _lag(committed: dict[str, dict[int, int]], ends: dict[str, dict[int, int]]) -> dict[str, Any]:
    per: dict[str, dict[str, int]] = {}
    total = 0
    for topic, parts in ends.items():
        done = committed.get(topic, {})
        per[topic] = {}
        for p, end in sorted(parts.items()):
            lag = max(0, end - done.get(p, 0))  # a partition not in the checkpoint is read from 0
            per[topic][str(p)] = lag
            total += lag
    return {"per_partition": per, "total": total}


def state_summary(spark, checkpoint: str) -> dict[str, Any]:
    """Rows and bytes per join side via Spark's state data sources (see STATE_BYTES_NOTE); for the
    paced engine's operator, its buffers (:func:`paced_state_summary`)."""
    from pyspark.sql import functions as F

    loc = str(checkpoint)
    out: dict[str, Any] = {"measured": STATE_BYTES_NOTE}
    # Spark 4.2: reading RocksDB state needs the driver's StateStoreCoordinator, which exists only
    # once the session's StreamingQueryManager does; in a fresh process (the CLI) the read otherwise
    # fails with "Cannot find endpoint: spark://StateStoreCoordinator". Touching spark.streams makes it.
    spark.streams.active  # noqa: B018
    meta = [r.asDict() for r in spark.read.format("state-metadata").load(loc).collect()]
    out["operators"] = meta
    paced = [m["operatorId"] for m in state_operators(meta, PACED_STATE)]
    if paced:
        op_dir = fs.join(loc, "state", str(paced[0]))  # a store per partition: its files in the partition's folder
        parts = [part for part, is_dir in fs.listdir(op_dir) if is_dir and part.isdigit()]
        on_disk = sum(fs.size(fs.join(op_dir, part)) for part in parts)
        summary = paced_state_summary(spark, loc)
        return {"measured": PACED_STATE_NOTE, "operators": meta, "paced": {**summary, "disk_bytes": on_disk}}
    join_ops = sorted({m["operatorId"] for m in state_operators(meta, JOIN_STATE)})
    op_id = join_ops[0] if join_ops else 0
    out["join_operator_id"] = op_id
    disk = _state_disk_bytes(fs.join(loc, "state", str(op_id)))
    for side in SIDES:
        df = spark.read.format("statestore").option("operatorId", op_id).option("joinSide", side).load(loc)
        # to_json(struct(value.*)), not to_json(value): in Spark 4.2 the joinSide value rows still carry
        # the join's internal "matched" flag beyond the declared schema, and to_json(value) fails with
        # ArrayIndexOutOfBoundsException; rebuilding the struct from its declared fields works.
        size = F.octet_length(F.to_json(F.struct("key.*"))) + F.octet_length(F.to_json(F.struct("value.*")))
        row = df.agg(
            F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum(size), F.lit(0)).alias("json_bytes"),
            F.countDistinct("partition_id").alias("partitions_with_rows"),
        ).first()
        out[side] = {
            "rows": int(row["rows"]),
            "json_bytes": int(row["json_bytes"]),
            "partitions_with_rows": int(row["partitions_with_rows"]),
            "disk_bytes": disk.get(side, 0),
        }
    return out


def paced_state_summary(spark, checkpoint: str, batch_id: int | None = None) -> dict[str, int]:
    """The paced operator's buffers as of ``batch_id`` (default: the last committed), read from its
    state store and decoded where they are (:func:`jobs.join.paced_state.buffer_sizes`)."""
    import pandas as pd

    from jobs.join.paced_operator import BLOCKS, BUFFERS
    from jobs.join.paced_state import FolderDictionaries, buffer_sizes, unpack_block
    from jobs.steps.stream import dictionaries_of

    dictionaries = dictionaries_of(str(checkpoint))
    store = FolderDictionaries(dictionaries) if dictionaries else None
    reader = spark.read.format("statestore").option("path", str(checkpoint)).option("stateVarName", BLOCKS)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)

    def sizes(batches):
        blocks = (unpack_block(bytes(b)) for pdf in batches for b in pdf[BUFFERS])
        total = buffer_sizes((blob for block in blocks for blob in block.values()), store)
        yield pd.DataFrame({k: [v] for k, v in total.items()})

    blobs = reader.load().select(f"user_map_value.{BUFFERS}")
    parts = blobs.mapInPandas(sizes, "keys long, events long, raw_bytes long, stored_bytes long").collect()
    return {k: int(sum(r[k] for r in parts)) for k in ("keys", "events", "raw_bytes", "stored_bytes")}


def _state_disk_bytes(op_dir: str) -> dict[str, int]:
    sizes = {side: 0 for side in SIDES}
    for part, part_is_dir in fs.listdir(op_dir):
        if not (part_is_dir and part.isdigit()):
            continue
        for store, store_is_dir in fs.listdir(fs.join(op_dir, part)):
            side = store.split("-", 1)[0]
            if side in sizes and store_is_dir:
                sizes[side] += fs.size(fs.join(op_dir, part, store))
    return sizes


def inspect_checkpoint(
    spark, checkpoint_path: str | Path, bootstrap: str | None = None, *, spec: Any = None, kafka_timeout_ms: int = 5000
) -> dict[str, Any]:
    """Everything an operator asks before a restart, as one dict (JSON-ready).

    Keys: path, query_id, last_committed_batch, last_planned_batch, batch_watermark_ms,
    batch_timestamp_ms, committed_offsets {topic: {partition: offset}}, planned_offsets (if a batch
    is in flight), shuffle_partitions, state_store, kafka {status, end_offsets, lag}, state {left, right, operators,
    measured} (needs ``spark``; skipped if None), health (validate_checkpoint).
    """
    cp = str(checkpoint_path)
    health = validate_checkpoint(cp, spec=spec)
    out: dict[str, Any] = {
        "path": cp,
        "exists": health.exists,
        "query_id": health.query_id,
        "last_committed_batch": health.last_committed_batch,
        "last_planned_batch": health.last_planned_batch,
    }
    committed: dict[str, dict[int, int]] = {}
    if health.last_committed_batch is not None:
        try:
            entries = read_log_file(fs.join(cp, "offsets", str(health.last_committed_batch)), "offsets")[1]
            committed = source_offsets(entries)
            out["batch_watermark_ms"] = entries[0].get("batchWatermarkMs")
            out["batch_timestamp_ms"] = entries[0].get("batchTimestampMs")
            conf = _offsets_conf(entries)
            out["shuffle_partitions"] = conf.get("spark.sql.shuffle.partitions")
            if conf.get(STATE_STORE_PROVIDER):
                out["state_store"] = state_store_name(conf[STATE_STORE_PROVIDER])
        except CheckpointError as e:
            out["offsets_error"] = str(e)
    out["committed_offsets"] = {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in committed.items()}
    if health.last_planned_batch is not None and health.last_planned_batch != health.last_committed_batch:
        try:
            planned_file = fs.join(cp, "offsets", str(health.last_planned_batch))
            planned = source_offsets(read_log_file(planned_file, "offsets")[1])
            out["planned_offsets"] = {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in planned.items()}
        except CheckpointError as e:
            out["planned_offsets_error"] = str(e)

    topics = sorted(set(committed) | ({spec.left.topic, spec.right.topic} if spec is not None else set()))
    if not bootstrap:
        out["kafka"] = {"status": "unknown", "reason": "no Kafka bootstrap servers given", "lag": "unknown"}
    elif not topics:
        out["kafka"] = {"status": "unknown", "reason": "no topics known (nothing committed, no spec)", "lag": "unknown"}
    else:
        try:
            from jobs.storage.kafka import end_offsets

            ends = end_offsets(bootstrap, topics, timeout_ms=kafka_timeout_ms)
            out["kafka"] = {
                "status": "ok",
                "bootstrap": bootstrap,
                "end_offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in ends.items()},
                "lag": _lag(committed, ends),
            }
        except Exception as e:  # broker down or unreachable: say so, do not fail the inspection
            out["kafka"] = {
                "status": "unreachable",
                "bootstrap": bootstrap,
                "reason": f"{type(e).__name__}: {e}",
                "lag": "unknown",
            }

    if spark is None:
        out["state"] = {"status": "skipped", "reason": "no Spark session"}
    elif health.last_committed_batch is None:
        out["state"] = {"status": "empty", "reason": "no committed batch yet"}
    else:
        try:
            out["state"] = {"status": "ok", **state_summary(spark, cp)}
        except Exception as e:  # a corrupt state folder must not hide the rest of the report
            out["state"] = {"status": "error", "reason": f"{type(e).__name__}: {str(e)[:500]}"}
    out["health"] = health.to_dict()
    return out


def render_inspection(info: dict[str, Any]) -> str:
    lines = [f"checkpoint {info['path']}"]
    if not info.get("exists"):
        return lines[0] + ": does not exist (the next start begins from the earliest offsets)"
    lines.append(f"  query id              {info.get('query_id')}")
    lines.append(f"  last committed batch  {_fmt(info.get('last_committed_batch'))}")
    lines.append(f"  last planned batch    {_fmt(info.get('last_planned_batch'))}")
    if info.get("batch_watermark_ms") is not None:
        wm = datetime.fromtimestamp(info["batch_watermark_ms"] / 1000, tz=UTC).isoformat()
        lines.append(f"  watermark             {wm}")
    if info.get("state_store"):
        lines.append(f"  state store           {info['state_store']} ({info.get('shuffle_partitions')} partitions)")
    kafka = info.get("kafka", {})
    lag = kafka.get("lag")
    lines.append("  offsets (committed -> Kafka end, lag):")
    for topic, parts in sorted(info.get("committed_offsets", {}).items()):
        for p, off in parts.items():
            end = kafka.get("end_offsets", {}).get(topic, {}).get(p, "?")
            pl = lag["per_partition"].get(topic, {}).get(p, "?") if isinstance(lag, dict) else "unknown"
            lines.append(f"    {topic}[{p}]  {off} -> {end}  lag {pl}")
    if isinstance(lag, dict):
        lines.append(f"  total lag             {lag['total']}")
    else:
        lines.append(f"  lag                   unknown ({kafka.get('reason', '')})")
    state = info.get("state", {})
    if state.get("status") == "ok" and "paced" in state:
        z = state["paced"]
        lines.append(
            f"  state (paced)         {z['keys']} keys, {z['events']} buffered events, {z['stored_bytes']} bytes "
            f"stored ({z['raw_bytes']} pickled), {z['disk_bytes']} bytes on disk"
        )
    elif state.get("status") == "ok":
        for side in SIDES:
            s = state[side]
            lines.append(
                f"  state {side:<5}           {s['rows']} rows, {s['json_bytes']} bytes as JSON, "
                f"{s['disk_bytes']} bytes on disk"
            )
    else:
        lines.append(f"  state                 {state.get('status')}: {state.get('reason', '')}")
    health = info.get("health", {})
    lines.append(f"  health                {'OK' if health.get('ok') else 'BROKEN'}")
    lines += [f"    [{i['severity']}] {i['code']}: {i['message']}" for i in health.get("issues", [])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- backup


def backup_path(checkpoint: str) -> str:
    """Where a checkpoint's backup goes: ``<checkpoint>.bak-<UTC>``, ``-1``, ``-2``... when that
    name is taken (a second backup in the same second would have gone inside the first)."""
    cp = checkpoint.rstrip("/")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target, n = f"{cp}.bak-{stamp}", 1
    while fs.exists(target):
        target, n = f"{cp}.bak-{stamp}-{n}", n + 1
    return target


def backup_checkpoint(path: str | Path) -> str | Path:
    """Copy the checkpoint to ``<path>.bak-<UTC timestamp>`` and return the copy's path (a
    ``Path`` for a local checkpoint, else the URI).

    The original is left untouched; an existing backup is never overwritten.
    """
    cp = str(path).rstrip("/")
    if not fs.is_dir(cp):
        raise CheckpointError(f"{cp}: no checkpoint to back up")
    target = backup_path(cp)
    fs.copy(cp, target)
    log.info("backed up %s to %s", cp, target)
    return fs.local(target) or target


def backup_stopped(
    spec: JoinSpec, path: str | Path, s: Settings | None = None, *, stop: bool = False
) -> tuple[str | Path, int | None]:
    """:func:`backup_checkpoint` of one of the pipeline's checkpoints while no stream writes it: a
    copy taken meanwhile can hold a commit whose state files it copied before they were written.

    Under a hold (supervisors neither start nor restart the stream) and as the checkpoint's owner
    (an increment or a stream of its own refuses the backup). A running supervised stream refuses
    it too, unless ``stop``: then it is stopped for the copy, and a supervisor starts it again when
    the hold ends. Any other folder (a backup, another pipeline's) is copied as it is. Returns (the
    backup, the pid stopped or None)."""
    from jobs.operate.process import running_stream_pid, stop_stream_process
    from jobs.settings import settings
    from jobs.storage.hold import CheckpointBusy, hold, stream_owner

    cp = str(path).rstrip("/")
    if not fs.is_dir(cp):
        raise CheckpointError(f"{cp}: no checkpoint to back up")

    def here(p: str) -> str:  # one spelling of a folder: a file: URI or a relative path as its absolute path
        local = fs.local(p)
        return str(local.resolve()) if local is not None else p.rstrip("/")

    root = (s or settings()).path("checkpoints", spec.pipeline)
    if here(cp) != here(fs.join(root, fs.name(cp))) or ".bak-" in fs.name(cp):
        return backup_checkpoint(cp), None  # not a folder the pipeline's stream writes
    with hold(spec, s, reason="checkpoint backup") as held:
        held.at_risk = False  # a copy leaves the checkpoint as it was, whatever happens
        running = running_stream_pid(spec, s)
        if running is not None and not stop:
            raise CheckpointBusy(
                f"{spec.pipeline}'s stream (pid {running}) is writing the checkpoint, and a copy taken meanwhile may "
                "not restore: pass --stop to stop it for the copy (a supervisor starts it again after)"
            )
        stopped = stop_stream_process(spec, s) if stop else None
        with stream_owner(spec, s, role="backup", wanted="backing up its checkpoint"):
            return backup_checkpoint(cp), stopped


def expected_query_id(progress_log: str) -> str | None:
    """The query id that last reported progress for this pipeline (if any)."""
    try:
        lines = fs.read_text(progress_log).splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            qid = json.loads(line).get("id")
        except (json.JSONDecodeError, AttributeError):
            continue
        if qid:
            return str(qid)
    return None
