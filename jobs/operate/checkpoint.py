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
  other topics), each with what to do.
* :func:`backup_checkpoint`: a full copy next to it, ``<path>.bak-<UTC timestamp>``.

CLI::

    python -m jobs.checkpoint inspect  --spec include/specs/search_sessions.yaml [--json]
    python -m jobs.checkpoint validate --spec include/specs/search_sessions.yaml [--json]   # exit 1 if broken
    python -m jobs.checkpoint backup   --spec include/specs/search_sessions.yaml
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.storage.checkpoints import (
    CheckpointError,
    batch_ids,
    local_path,
    read_log_file,
    read_query_id,
    source_offsets,
)

log = logging.getLogger("joinshift.checkpoint")

SIDES = ("left", "right")
#: State files of the HDFS and RocksDB providers: <version>[_<checkpoint unique id>].<kind>
_STATE_FILE = re.compile(r"^(\d+)(?:_[0-9A-Za-z-]+)?\.(changelog|zip|delta|snapshot)$")
#: How the bytes of the state are measured (also returned by inspect).
STATE_BYTES_NOTE = (
    "rows: rows the state data source returns for the side (format 'statestore', option joinSide) at the "
    "last committed batch; json_bytes: sum over those rows of octet_length(to_json(key)) + "
    "octet_length(to_json(value)) (the value without the join's internal 'matched' flag), a proxy for "
    "the logical size of the buffered rows (not RocksDB's encoded, compressed size); disk_bytes: size of "
    "the side's store files under state/ (changelogs and snapshots of every retained version, so an upper "
    "bound of what a restart reads)."
)


def _replay_hint(spec_arg: str = "<spec>") -> str:
    return (f"Keep this checkpoint as it is; back it up (python -m jobs.checkpoint backup --spec {spec_arg}) "
            f"and rebuild the join from Kafka with `joinshift replay --spec {spec_arg}` (a fresh checkpoint "
            "that re-reads both topics from their earliest offsets).")


def _offsets_conf(entries: list[Any]) -> dict[str, str]:
    conf = entries[0].get("conf") if entries and isinstance(entries[0], dict) else None
    return dict(conf) if isinstance(conf, dict) else {}


# ------------------------------------------------------------------------------- validate

@dataclass(frozen=True)
class Issue:
    code: str
    severity: str  # "error" | "warning" | "info"
    message: str


@dataclass
class CheckpointHealth:
    path: str
    exists: bool
    query_id: str | None = None
    last_committed_batch: int | None = None
    last_planned_batch: int | None = None
    issues: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No errors (warnings and infos allowed)."""
        return not any(i.severity == "error" for i in self.issues)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    def codes(self) -> set[str]:
        return {i.code for i in self.issues}

    def add(self, code: str, severity: str, message: str) -> None:
        self.issues.append(Issue(code, severity, message))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d

    def render(self) -> str:
        head = f"checkpoint {self.path}: " + ("OK" if self.ok else f"BROKEN ({len(self.errors)} error(s))")
        lines = [head]
        if self.exists:
            lines.append(f"  query id {self.query_id or '?'}, last committed batch "
                         f"{_fmt(self.last_committed_batch)}, last planned batch {_fmt(self.last_planned_batch)}")
        lines += [f"  [{i.severity}] {i.code}: {i.message}" for i in self.issues]
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    return "none" if v is None else str(v)


def validate_checkpoint(path: str | Path, spec: Any = None, expected_query_id: str | None = None,
                        spec_arg: str = "<spec>") -> CheckpointHealth:
    """Find what is wrong with a checkpoint; read-only.

    With ``spec`` (a JoinSpec) the checkpoint is also checked against the current spec: two Kafka
    sources reading exactly the spec's two topics, and the state partitioning. With
    ``expected_query_id`` (e.g. the id in the pipeline's progress log) a replaced checkpoint is caught.
    """
    cp = local_path(path)
    h = CheckpointHealth(path=str(cp), exists=cp.is_dir())
    hint = _replay_hint(spec_arg)
    if not h.exists:
        h.add("no_checkpoint", "warning",
              f"{cp} does not exist: the next start creates a fresh checkpoint and reads both topics from "
              "the earliest offsets (that is a full replay). If a checkpoint was expected here, check "
              "storage_root / the pipeline name; look for a backup next to it (<path>.bak-*).")
        return h

    # metadata: the query id
    try:
        h.query_id = read_query_id(cp)
    except CheckpointError as e:
        missing = not (cp / "metadata").exists()
        h.add("missing_metadata" if missing else "corrupt_metadata", "error",
              f"{e}. Spark would start under a NEW query id while resuming the old offsets, so the sink's "
              "idempotent appends (Delta txnAppId = query id) no longer recognise re-run batches and "
              f"can duplicate output. {hint}")
    if expected_query_id and h.query_id and h.query_id != expected_query_id:
        h.add("query_id_mismatch", "error",
              f"checkpoint query id {h.query_id} differs from the expected {expected_query_id} (the id that "
              "last reported progress for this pipeline): the checkpoint was replaced or belongs to another "
              f"query. Restarting from it would mix two queries' offsets and sink transaction ids. {hint}")

    # the logs
    offsets_dir, commits_dir = cp / "offsets", cp / "commits"
    offset_ids, commit_ids = batch_ids(offsets_dir), batch_ids(commits_dir)
    if not offsets_dir.is_dir() and (commits_dir.is_dir() or (cp / "state").is_dir()):
        h.add("missing_offsets_dir", "error", f"{offsets_dir} is missing but the checkpoint has commits or "
                                             f"state: the write-ahead log is gone. {hint}")
    parsed_offsets: dict[int, list[Any]] = {}
    for b in offset_ids:
        try:
            parsed_offsets[b] = read_log_file(offsets_dir / str(b), "offsets")[1]
        except CheckpointError as e:
            latest = b == offset_ids[-1]
            h.add("corrupt_offsets", "error",
                  f"{e}. " + ("This is the latest planned batch: Spark fails to restart on it. "
                              if latest else "An older batch's offsets are unreadable. ") + hint)
    for b in commit_ids:
        try:
            read_log_file(commits_dir / str(b), "commits")
        except CheckpointError as e:
            h.add("corrupt_commit", "error", f"{e}. Spark fails to restart on it. {hint}")
    h.last_planned_batch = offset_ids[-1] if offset_ids else None
    h.last_committed_batch = commit_ids[-1] if commit_ids else None

    # Spark keeps the last minBatchesToRetain (100) batches and purges older files of both logs, so a
    # commit without offsets is only wrong at or after the oldest offsets file (or with none at all).
    oldest = offset_ids[0] if offset_ids else -1
    orphan_commits = [b for b in commit_ids if b not in offset_ids and b >= oldest]
    if orphan_commits:
        h.add("commit_without_offsets", "error",
              f"commits exist for batch(es) {_ids(orphan_commits)} but {offsets_dir} has no file for them: "
              f"the offsets those batches read are lost, so Spark cannot resume after them. {hint}")
    if h.last_committed_batch is not None and h.last_planned_batch is not None:
        ahead = h.last_planned_batch - h.last_committed_batch
        if ahead == 1:
            h.add("batch_in_flight", "info",
                  f"batch {h.last_planned_batch} was planned but not committed (the query stopped mid-batch): "
                  "the restart re-runs it with the same offsets; the sink is idempotent.")
        elif ahead > 1:
            h.add("planned_far_ahead", "warning",
                  f"offsets go up to batch {h.last_planned_batch} but the last commit is {h.last_committed_batch}: "
                  "Spark only plans one batch ahead, so commit files are missing. Back the checkpoint up before "
                  "restarting.")
    elif h.last_committed_batch is None and h.last_planned_batch is not None:
        h.add("batch_in_flight", "info", f"batch {h.last_planned_batch} was planned, nothing committed yet.")

    # state for the committed batches
    last_offsets = parsed_offsets.get(h.last_committed_batch) if h.last_committed_batch is not None else None
    conf = _offsets_conf(last_offsets) if last_offsets else {}
    if h.last_committed_batch is not None:
        _check_state(cp, h, conf, hint)

    # compatibility with the current spec
    newest = parsed_offsets[max(parsed_offsets)] if parsed_offsets else None  # newest readable batch
    if spec is not None and newest is not None:
        _check_spec(h, spec, newest, conf or _offsets_conf(newest), hint)
    return h


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:10])) + (" …" if len(ids) > 10 else "")


def _check_state(cp: Path, h: CheckpointHealth, conf: dict[str, str], hint: str) -> None:
    state = cp / "state"
    needed = h.last_committed_batch + 1  # state version written by the last committed batch
    if not state.is_dir():
        h.add("missing_state", "error",
              f"{state} is missing but batches up to {h.last_committed_batch} are committed: the join's "
              f"buffered rows (the window) are gone and Spark cannot load state version {needed}. {hint}")
        return
    operators = sorted(p for p in state.iterdir() if p.is_dir() and p.name.isdigit())
    if not operators:
        h.add("missing_state", "error", f"{state} has no operator folder (expected state/0 for the join). {hint}")
        return
    try:
        n_expected = int(conf.get("spark.sql.shuffle.partitions", "0"))
    except ValueError:
        n_expected = 0
    for op in operators:
        parts = sorted((p for p in op.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
        if n_expected and len(parts) < n_expected:
            have = {int(p.name) for p in parts}
            missing = [i for i in range(n_expected) if i not in have]
            h.add("missing_state", "error",
                  f"{op}: state partition folder(s) {_ids(missing)} missing (the checkpoint has "
                  f"{n_expected} state partitions). {hint}")
        for part in parts:
            if any(_STATE_FILE.match(f.name) for f in part.iterdir()):
                stores = [part]  # an operator's single "default" store (e.g. the de-duplication) lives here
            else:  # the join's four named stores; SSTs/ is RocksDB's shared file folder, not a store
                stores = [s for s in part.iterdir() if s.is_dir() and not s.name.startswith((".", "_"))
                          and s.name != "SSTs"]
            if not stores:
                h.add("missing_state", "error", f"{part}: no state store folders. {hint}")
            for store in stores:
                versions = [int(m.group(1)) for f in store.iterdir() if (m := _STATE_FILE.match(f.name))]
                if not versions:
                    h.add("missing_state", "error", f"{store}: no state files (changelog/snapshot). {hint}")
                elif max(versions) < needed:
                    h.add("missing_state", "error",
                          f"{store}: newest state version is {max(versions)} but batch {h.last_committed_batch} "
                          f"is committed (needs version {needed}): state files are missing. {hint}")


def _check_spec(h: CheckpointHealth, spec: Any, entries: list[Any], conf: dict[str, str], hint: str) -> None:
    sources = entries[1:]
    expected = {spec.left.topic, spec.right.topic}
    if len(sources) != 2:
        h.add("incompatible_sources", "error",
              f"the checkpoint has {len(sources)} source(s); the spec's join reads 2 (topics "
              f"{spec.left.topic}, {spec.right.topic}). Spark does not allow changing the number of sources "
              f"between restarts. {hint}")
    topics = set(source_offsets(entries))
    if topics and topics != expected:
        h.add("incompatible_topics", "error",
              f"the checkpoint reads topic(s) {', '.join(sorted(topics))} but the spec joins "
              f"{', '.join(sorted(expected))}: this checkpoint belongs to another spec (changing subscribed "
              f"topics is not allowed between restarts; see python -m jobs.plan). {hint}")
    n = conf.get("spark.sql.shuffle.partitions")
    if n and n.isdigit() and int(n) != spec.streaming.shuffle_partitions:
        h.add("shuffle_partitions_fixed", "warning",
              f"the checkpoint's state has {n} partitions; the spec says streaming.shuffle_partitions="
              f"{spec.streaming.shuffle_partitions}, which Spark ignores while this checkpoint is used.")


# ------------------------------------------------------------------------------- inspect

def kafka_end_offsets(bootstrap: str, topics: list[str], timeout_ms: int = 5000) -> dict[str, dict[int, int]]:
    """``{topic: {partition: end offset}}`` (the offset the next record will get)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=max(timeout_ms, 1000) + 1000,
                             bootstrap_timeout_ms=timeout_ms, enable_auto_commit=False)
    try:
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            parts = sorted(consumer.partitions_for_topic(topic) or ())
            if not parts:
                out[topic] = {}
                continue
            ends = consumer.end_offsets([TopicPartition(topic, p) for p in parts])
            out[topic] = {tp.partition: int(off) for tp, off in ends.items()}
        return out
    finally:
        consumer.close()


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


def state_summary(spark, checkpoint: Path) -> dict[str, Any]:
    """Rows and bytes per join side via Spark's state data sources (see STATE_BYTES_NOTE)."""
    from pyspark.sql import functions as F

    loc = str(checkpoint)
    out: dict[str, Any] = {"measured": STATE_BYTES_NOTE}
    # Spark 4.2: reading RocksDB state needs the driver's StateStoreCoordinator, which exists only
    # once the session's StreamingQueryManager does; in a fresh process (the CLI) the read otherwise
    # fails with "Cannot find endpoint: spark://StateStoreCoordinator". Touching spark.streams makes it.
    spark.streams.active  # noqa: B018
    meta = [r.asDict() for r in spark.read.format("state-metadata").load(loc).collect()]
    out["operators"] = meta
    join_ops = sorted({m["operatorId"] for m in meta if "join" in str(m.get("operatorName", "")).lower()})
    op_id = join_ops[0] if join_ops else 0
    out["join_operator_id"] = op_id
    disk = _state_disk_bytes(checkpoint / "state" / str(op_id))
    for side in SIDES:
        df = (spark.read.format("statestore").option("operatorId", op_id).option("joinSide", side).load(loc))
        # to_json(struct(value.*)), not to_json(value): in Spark 4.2 the joinSide value rows still carry
        # the join's internal "matched" flag beyond the declared schema, and to_json(value) fails with
        # ArrayIndexOutOfBoundsException; rebuilding the struct from its declared fields works.
        size = (F.octet_length(F.to_json(F.struct("key.*"))) + F.octet_length(F.to_json(F.struct("value.*"))))
        row = df.agg(
            F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum(size), F.lit(0)).alias("json_bytes"),
            F.countDistinct("partition_id").alias("partitions_with_rows"),
        ).first()
        out[side] = {"rows": int(row["rows"]), "json_bytes": int(row["json_bytes"]),
                     "partitions_with_rows": int(row["partitions_with_rows"]), "disk_bytes": disk.get(side, 0)}
    return out


def _state_disk_bytes(op_dir: Path) -> dict[str, int]:
    sizes = {side: 0 for side in SIDES}
    if not op_dir.is_dir():
        return sizes
    for part in op_dir.iterdir():
        if not (part.is_dir() and part.name.isdigit()):
            continue
        for store in part.iterdir():
            side = store.name.split("-", 1)[0]
            if side in sizes and store.is_dir():
                sizes[side] += sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    return sizes


def inspect_checkpoint(spark, checkpoint_path: str | Path, bootstrap: str | None = None, *,
                       spec: Any = None, kafka_timeout_ms: int = 5000) -> dict[str, Any]:
    """Everything an operator asks before a restart, as one dict (JSON-ready).

    Keys: path, query_id, last_committed_batch, last_planned_batch, batch_watermark_ms,
    batch_timestamp_ms, committed_offsets {topic: {partition: offset}}, planned_offsets (if a batch
    is in flight), shuffle_partitions, kafka {status, end_offsets, lag}, state {left, right, operators,
    measured} (needs ``spark``; skipped if None), health (validate_checkpoint).
    """
    cp = local_path(checkpoint_path)
    health = validate_checkpoint(cp, spec=spec)
    out: dict[str, Any] = {
        "path": str(cp), "exists": health.exists, "query_id": health.query_id,
        "last_committed_batch": health.last_committed_batch, "last_planned_batch": health.last_planned_batch,
    }
    committed: dict[str, dict[int, int]] = {}
    if health.last_committed_batch is not None:
        try:
            entries = read_log_file(cp / "offsets" / str(health.last_committed_batch), "offsets")[1]
            committed = source_offsets(entries)
            out["batch_watermark_ms"] = entries[0].get("batchWatermarkMs")
            out["batch_timestamp_ms"] = entries[0].get("batchTimestampMs")
            out["shuffle_partitions"] = _offsets_conf(entries).get("spark.sql.shuffle.partitions")
        except CheckpointError as e:
            out["offsets_error"] = str(e)
    out["committed_offsets"] = {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in committed.items()}
    if health.last_planned_batch is not None and health.last_planned_batch != health.last_committed_batch:
        try:
            planned = source_offsets(read_log_file(cp / "offsets" / str(health.last_planned_batch), "offsets")[1])
            out["planned_offsets"] = {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in planned.items()}
        except CheckpointError as e:
            out["planned_offsets_error"] = str(e)

    topics = sorted(set(committed) | ({spec.left.topic, spec.right.topic} if spec is not None else set()))
    if not bootstrap:
        out["kafka"] = {"status": "unknown", "reason": "no Kafka bootstrap servers given", "lag": "unknown"}
    elif not topics:
        out["kafka"] = {"status": "unknown", "reason": "no topics known (nothing committed, no spec)",
                        "lag": "unknown"}
    else:
        try:
            ends = kafka_end_offsets(bootstrap, topics, timeout_ms=kafka_timeout_ms)
            out["kafka"] = {"status": "ok", "bootstrap": bootstrap,
                            "end_offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in ends.items()},
                            "lag": _lag(committed, ends)}
        except Exception as e:  # broker down or unreachable: say so, do not fail the inspection
            out["kafka"] = {"status": "unreachable", "bootstrap": bootstrap, "reason": f"{type(e).__name__}: {e}",
                            "lag": "unknown"}

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
    if state.get("status") == "ok":
        for side in SIDES:
            s = state[side]
            lines.append(f"  state {side:<5}           {s['rows']} rows, {s['json_bytes']} bytes as JSON, "
                         f"{s['disk_bytes']} bytes on disk")
    else:
        lines.append(f"  state                 {state.get('status')}: {state.get('reason', '')}")
    health = info.get("health", {})
    lines.append(f"  health                {'OK' if health.get('ok') else 'BROKEN'}")
    lines += [f"    [{i['severity']}] {i['code']}: {i['message']}" for i in health.get("issues", [])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- backup

def backup_checkpoint(path: str | Path) -> Path:
    """Copy the checkpoint to ``<path>.bak-<UTC timestamp>`` and return the copy's path.

    The original is left untouched; an existing backup is never overwritten.
    """
    cp = local_path(path)
    if not cp.is_dir():
        raise CheckpointError(f"{cp}: no checkpoint to back up")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = cp.with_name(f"{cp.name}.bak-{stamp}")
    n = 1
    while target.exists():
        target = cp.with_name(f"{cp.name}.bak-{stamp}-{n}")
        n += 1
    shutil.copytree(cp, target, symlinks=True, copy_function=shutil.copy2)
    log.info("backed up %s to %s", cp, target)
    return target


# ------------------------------------------------------------------------------- CLI

def _expected_query_id(progress_log: str) -> str | None:
    """The query id that last reported progress for this pipeline (if any)."""
    try:
        lines = Path(progress_log).read_text().splitlines()
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.checkpoint",
                                description="Inspect, validate or back up the streaming join's checkpoint.")
    p.add_argument("command", choices=("inspect", "validate", "backup"))
    p.add_argument("--spec", required=True, help="join spec YAML (locates the checkpoint, names the topics)")
    p.add_argument("--checkpoint", help="checkpoint folder (default: the spec's stream_join checkpoint)")
    p.add_argument("--query", default="stream_join", help="query name whose checkpoint to use (default stream_join)")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # refusals of a down broker are expected

    from jobs.spec import SpecError, load_spec
    from jobs.storage.tables import Tables

    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        print(f"jobs.checkpoint: {exc}", file=sys.stderr)
        return 2
    tables = Tables.of(spec)
    path = args.checkpoint or tables.checkpoint(args.query)
    try:
        if args.command == "backup":
            target = backup_checkpoint(path)
            print(json.dumps({"backup": str(target)}) if args.json else f"backed up {path} to {target}")
            return 0
        if args.command == "validate":
            expected = None if args.checkpoint else _expected_query_id(tables.progress_log(args.query))
            health = validate_checkpoint(path, spec=spec, expected_query_id=expected, spec_arg=args.spec)
            print(json.dumps(health.to_dict(), indent=2) if args.json else health.render())
            return 0 if health.ok else 1
        from jobs.storage.kafka import bootstrap_servers

        try:
            bootstrap = bootstrap_servers()
        except Exception as e:  # no broker: inspect the checkpoint anyway, lag "unknown"
            log.warning("Kafka lag unknown: %s", e)
            bootstrap = None
        spark = None
        if local_path(path).is_dir():
            from jobs.storage.spark import get_spark

            spark = get_spark("joinshift-checkpoint-inspect")
        info = inspect_checkpoint(spark, path, bootstrap, spec=spec)
        if bootstrap is None:
            info["kafka"]["reason"] = "no Kafka broker running (start it with `joinshift kafka start`)"
        print(json.dumps(info, indent=2, default=str) if args.json else render_inspection(info))
        return 0 if info["health"]["ok"] else 1
    except CheckpointError as exc:
        print(f"jobs.checkpoint: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
