"""Checkpoint files of a Structured Streaming query: reading its logs, its query id, and the spec
record joinshift keeps inside it. Read-only helpers shared by the stream (its spec guard), the
checkpoint tools and replay; a checkpoint is a local folder or a URI (``jobs.storage.fs``).

A checkpoint is a folder::

    metadata                 {"id": "<query id>"}: the query's identity across restarts
    offsets/<batch>          the write-ahead log: "v1", a metadata JSON line, then one JSON line per
                             source, e.g. {"search_clicks": {"0": 12, "1": 9}}, "-" for none yet
    commits/<batch>          "v1" and {"nextBatchWatermarkMs": ...}: the batch is done (sink written)
    state/<op>/<partition>/  the operators' state stores
    joinshift_spec.json      the join spec the checkpoint was built with (joinshift's own)
"""

from __future__ import annotations

import json
import re
from typing import Any

from jobs.spec.streaming import StateStore
from jobs.storage import fs

BATCH_FILE = re.compile(r"^\d+$")
#: The spec a checkpoint was built with, kept inside it (so a backup carries it along).
SPEC_RECORD = "joinshift_spec.json"
#: The paced operator's state layout a checkpoint holds (a number; absent before layout 3).
PACED_LAYOUT_RECORD = "joinshift_paced_layout"
#: The state store a query runs with; its offset log records it, and Spark restores it from there.
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
#: The spec's ``streaming.state_store`` -> Spark's provider class (the heap's is Spark's default).
STATE_STORE_PROVIDERS = {
    StateStore.rocksdb: "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    StateStore.memory: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}


def state_store_name(provider: str) -> str:
    """``rocksdb`` or ``memory`` for a provider class an offset log records; any other class as it is."""
    return next((k.value for k, v in STATE_STORE_PROVIDERS.items() if v == provider), provider)


class CheckpointError(RuntimeError):
    """The checkpoint cannot be read (missing or corrupt)."""


def batch_ids(log_dir: str) -> list[int]:
    """Batch ids with a file in ``offsets/`` or ``commits/`` (hidden .crc and temp files skipped)."""
    return sorted(int(n) for n, folder in fs.listdir(log_dir) if BATCH_FILE.match(n) and not folder)


def read_log_file(path: str, kind: str) -> tuple[str, list[Any]]:
    """``(version, entries)`` of an offsets or commits file; raises CheckpointError saying what is wrong.

    offsets: entries = [metadata dict, source offset (dict, or None for "-"), ...]
    commits: entries = [commit metadata dict]
    """
    try:
        raw = fs.read_bytes(path)
    except Exception as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    if not raw.strip():
        raise CheckpointError(f"{path}: empty {kind} file (truncated write?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not UTF-8 text; not a {kind} log file") from None
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not re.match(r"^v\d+$", lines[0].strip()):
        raise CheckpointError(f"{path}: first line is {lines[0][:40]!r}, expected a version such as 'v1'")
    version, body = lines[0].strip(), lines[1:]
    minimum = 2 if kind == "offsets" else 1
    if len(body) < minimum:
        raise CheckpointError(
            f"{path}: truncated {kind} file: {len(body)} line(s) after {version}, expected at least {minimum} "
            + ("(metadata + one line per source)" if kind == "offsets" else "(commit metadata)")
        )
    entries: list[Any] = []
    for i, line in enumerate(body, start=2):
        if kind == "offsets" and i > 2 and line.strip() == "-":
            entries.append(None)
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise CheckpointError(
                f"{path}: line {i} is not valid JSON ({e.msg} at column {e.colno}); the file is corrupt or truncated"
            ) from None
        if not isinstance(value, dict):
            raise CheckpointError(f"{path}: line {i} is JSON {type(value).__name__}, expected an object")
        entries.append(value)
    return version, entries


def read_query_id(checkpoint: str) -> str:
    meta = fs.join(checkpoint, "metadata")
    try:
        data = json.loads(fs.read_text(meta).strip().split("\n")[0])
    except FileNotFoundError:
        raise CheckpointError(f"{meta}: missing (the query id lives here)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, IndexError) as e:
        raise CheckpointError(f"{meta}: unreadable ({e})") from None
    if not isinstance(data, dict) or not data.get("id"):
        raise CheckpointError(f"{meta}: has no query id")
    return str(data["id"])


def kafka_offsets(offset: Any) -> dict[str, dict[int, int]]:
    """``{topic: {partition: offset}}`` of one source offset (a line of a checkpoint's offsets file,
    or a progress line's start or end offset; a dict or its JSON text). Entries that are not a
    topic's offsets are left out: the paced source's own (``@paced``, the PTs a micro-batch ran
    with: :mod:`jobs.storage.aligned_source`; no Kafka topic can be named so)."""
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return {}
    if not isinstance(offset, dict):
        return {}
    return {
        topic: {int(p): int(o) for p, o in parts.items()}
        for topic, parts in offset.items()
        if isinstance(parts, dict) and not topic.startswith("@")
    }


def source_offsets(entries: list[Any]) -> dict[str, dict[int, int]]:
    """Merge the per-source offset lines of an offsets file into ``{topic: {partition: offset}}``."""
    out: dict[str, dict[int, int]] = {}
    for src in entries[1:]:
        for topic, parts in kafka_offsets(src).items():
            out.setdefault(topic, {}).update(parts)
    return out


def checkpoint_query_id(checkpoint: str) -> str:
    """The streaming query's id, which Spark writes to ``<checkpoint>/metadata`` when it starts
    and keeps across restarts; a fresh checkpoint gets a new one."""
    return read_query_id(checkpoint)


def committed_offsets(checkpoint: str) -> tuple[dict[str, dict[int, int]], int | None] | None:
    """``({topic: {partition: offset}}, watermark ms)`` of the checkpoint's last committed
    micro-batch: the offsets it read up to (the next offset to read) and the watermark it ran with
    (None before there is one); ``({}, None)`` when it committed none; None when there is no
    checkpoint. Raises CheckpointError when its logs cannot be read."""
    if not fs.exists(checkpoint):
        return None
    done = batch_ids(fs.join(checkpoint, "commits")) if fs.is_dir(fs.join(checkpoint, "commits")) else []
    if not done:
        return {}, None
    entries = read_log_file(fs.join(checkpoint, "offsets", str(done[-1])), "offsets")[1]
    return source_offsets(entries), int(entries[0].get("batchWatermarkMs") or 0) or None
