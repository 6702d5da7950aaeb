"""Validate the streaming join's checkpoint: what is broken, each with what to do (read-only).

The checkpoint's layout and the other tools (inspect, backup, the CLI): :mod:`jobs.operate.checkpoint`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs.spec import Engine
from jobs.storage import fs
from jobs.storage.checkpoints import (
    STATE_STORE_PROVIDER,
    STATE_STORE_PROVIDERS,
    CheckpointError,
    batch_ids,
    read_log_file,
    read_query_id,
    source_offsets,
    state_store_name,
)

SIDES = ("left", "right")
#: State files of the HDFS and RocksDB providers: <version>[_<checkpoint unique id>].<kind>
_STATE_FILE = re.compile(r"^(\d+)(?:_[0-9A-Za-z-]+)?\.(changelog|zip|delta|snapshot)$")


def _replay_hint(spec_arg: str = "<spec>") -> str:
    return (
        f"Keep this checkpoint as it is and rebuild the join from Kafka with `joinshift replay --spec {spec_arg} "
        "--cutover <T>` (T: from when the rebuilt join owns the output, e.g. now; add --dry-run first): it "
        "keeps this checkpoint as a .bak copy and builds a fresh one from what a live run's state at T reaches back "
        "to. Step by step: joinshift runbook recover_broken_checkpoint."
    )


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
            lines.append(
                f"  query id {self.query_id or '?'}, last committed batch "
                f"{_fmt(self.last_committed_batch)}, last planned batch {_fmt(self.last_planned_batch)}"
            )
        lines += [f"  [{i.severity}] {i.code}: {i.message}" for i in self.issues]
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    return "none" if v is None else str(v)


def validate_checkpoint(
    path: str | Path, spec: Any = None, expected_query_id: str | None = None, spec_arg: str = "<spec>"
) -> CheckpointHealth:
    """Find what is wrong with a checkpoint; read-only.

    With ``spec`` (a JoinSpec) the checkpoint is also checked against the current spec: two Kafka
    sources reading exactly the spec's two topics, and the state partitioning. With
    ``expected_query_id`` (e.g. the id in the pipeline's progress log) a replaced checkpoint is caught.
    """
    cp = str(path)
    h = CheckpointHealth(path=cp, exists=fs.is_dir(cp))
    hint = _replay_hint(spec_arg)
    if not h.exists and fs.exists(cp):
        h.add("not_a_folder", "error", f"{cp} is a file, not a checkpoint folder: name the checkpoint's folder")
        return h
    if not h.exists:
        h.add(
            "no_checkpoint",
            "warning",
            f"{cp} does not exist: the next start creates a fresh checkpoint and reads both topics from "
            "the earliest offsets (that is a full replay). If a checkpoint was expected here, check "
            "storage_root / the pipeline name; look for a backup next to it (<path>.bak-*).",
        )
        return h

    # metadata: the query id
    try:
        h.query_id = read_query_id(cp)
    except CheckpointError as e:
        missing = not fs.exists(fs.join(cp, "metadata"))
        h.add(
            "missing_metadata" if missing else "corrupt_metadata",
            "error",
            f"{e}. Spark would start under a NEW query id while resuming the old offsets, so the sink's "
            "idempotent appends (Delta txnAppId = query id) no longer recognise re-run batches and "
            f"can duplicate output. {hint}",
        )
    if expected_query_id and h.query_id and h.query_id != expected_query_id:
        h.add(
            "query_id_mismatch",
            "error",
            f"checkpoint query id {h.query_id} differs from the expected {expected_query_id} (the id that "
            "last reported progress for this pipeline): the checkpoint was replaced or belongs to another "
            f"query. Restarting from it would mix two queries' offsets and sink transaction ids. {hint}",
        )

    # the logs
    offsets_dir, commits_dir = fs.join(cp, "offsets"), fs.join(cp, "commits")
    offset_ids, commit_ids = batch_ids(offsets_dir), batch_ids(commits_dir)
    if not fs.is_dir(offsets_dir) and (fs.is_dir(commits_dir) or fs.is_dir(fs.join(cp, "state"))):
        h.add(
            "missing_offsets_dir",
            "error",
            f"{offsets_dir} is missing but the checkpoint has commits or state: the write-ahead log is gone. {hint}",
        )
    parsed_offsets: dict[int, list[Any]] = {}
    for b in offset_ids:
        try:
            parsed_offsets[b] = read_log_file(fs.join(offsets_dir, str(b)), "offsets")[1]
        except CheckpointError as e:
            latest = b == offset_ids[-1]
            h.add(
                "corrupt_offsets",
                "error",
                f"{e}. "
                + (
                    "This is the latest planned batch: Spark fails to restart on it. "
                    if latest
                    else "An older batch's offsets are unreadable. "
                )
                + hint,
            )
    for b in commit_ids:
        try:
            read_log_file(fs.join(commits_dir, str(b)), "commits")
        except CheckpointError as e:
            h.add("corrupt_commit", "error", f"{e}. Spark fails to restart on it. {hint}")
    h.last_planned_batch = offset_ids[-1] if offset_ids else None
    h.last_committed_batch = commit_ids[-1] if commit_ids else None

    # Spark keeps the last minBatchesToRetain (100) batches and purges older files of both logs, so a
    # commit without offsets is only wrong at or after the oldest offsets file (or with none at all).
    oldest = offset_ids[0] if offset_ids else -1
    orphan_commits = [b for b in commit_ids if b not in offset_ids and b >= oldest]
    if orphan_commits:
        h.add(
            "commit_without_offsets",
            "error",
            f"commits exist for batch(es) {_ids(orphan_commits)} but {offsets_dir} has no file for them: "
            f"the offsets those batches read are lost, so Spark cannot resume after them. {hint}",
        )
    if h.last_committed_batch is not None and h.last_planned_batch is not None:
        ahead = h.last_planned_batch - h.last_committed_batch
        if ahead == 1:
            h.add(
                "batch_in_flight",
                "info",
                f"batch {h.last_planned_batch} was planned but not committed (the query stopped mid-batch): "
                "the restart re-runs it with the same offsets; the sink is idempotent.",
            )
        elif ahead > 1:
            h.add(
                "planned_far_ahead",
                "warning",
                f"offsets go up to batch {h.last_planned_batch} but the last commit is {h.last_committed_batch}: "
                "Spark only plans one batch ahead, so commit files are missing. Back the checkpoint up before "
                "restarting.",
            )
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


def _folders(uri: str) -> list[str]:
    """Names of the numbered sub-folders (operators, partitions), in number order."""
    return sorted((n for n, folder in fs.listdir(uri) if folder and n.isdigit()), key=int)


def _check_state(cp: str, h: CheckpointHealth, conf: dict[str, str], hint: str) -> None:
    assert h.last_committed_batch is not None  # called only once a batch is committed
    state = fs.join(cp, "state")
    needed = h.last_committed_batch + 1  # state version written by the last committed batch
    if not fs.is_dir(state):
        h.add(
            "missing_state",
            "error",
            f"{state} is missing but batches up to {h.last_committed_batch} are committed: the join's "
            f"buffered rows (the window) are gone and Spark cannot load state version {needed}. {hint}",
        )
        return
    operators = [fs.join(state, n) for n in _folders(state)]
    if not operators:
        h.add("missing_state", "error", f"{state} has no operator folder (expected state/0 for the join). {hint}")
        return
    try:
        n_expected = int(conf.get("spark.sql.shuffle.partitions", "0"))
    except ValueError:
        n_expected = 0
    for op in operators:
        parts = [fs.join(op, n) for n in _folders(op)]
        if n_expected and len(parts) < n_expected:
            have = {int(fs.name(p)) for p in parts}
            missing = [i for i in range(n_expected) if i not in have]
            h.add(
                "missing_state",
                "error",
                f"{op}: state partition folder(s) {_ids(missing)} missing (the checkpoint has "
                f"{n_expected} state partitions). {hint}",
            )
        for part in parts:
            entries = fs.listdir(part)
            if any(_STATE_FILE.match(n) for n, _ in entries):
                stores = [part]  # an operator's single "default" store (e.g. the de-duplication) lives here
            else:  # the join's four named stores; SSTs/ is RocksDB's shared file folder, not a store
                stores = [
                    fs.join(part, n) for n, folder in entries if folder and not n.startswith((".", "_")) and n != "SSTs"
                ]
            if not stores:
                h.add("missing_state", "error", f"{part}: no state store folders. {hint}")
            for store in stores:
                versions = [int(m.group(1)) for n, _ in fs.listdir(store) if (m := _STATE_FILE.match(n))]
                if not versions:
                    h.add("missing_state", "error", f"{store}: no state files (changelog/snapshot). {hint}")
                elif max(versions) < needed:
                    h.add(
                        "missing_state",
                        "error",
                        f"{store}: newest state version is {max(versions)} but batch {h.last_committed_batch} "
                        f"is committed (needs version {needed}): state files are missing. {hint}",
                    )


def _check_spec(h: CheckpointHealth, spec: Any, entries: list[Any], conf: dict[str, str], hint: str) -> None:
    sources = entries[1:]
    expected = {spec.left.topic, spec.right.topic}
    reads = 1 if spec.streaming.engine == Engine.paced else 2  # the paced engine's one source reads both topics
    if len(sources) != reads:
        h.add(
            "incompatible_sources",
            "error",
            f"the checkpoint has {len(sources)} source(s); the spec's join reads {reads} (topics "
            f"{spec.left.topic}, {spec.right.topic}). Spark does not allow changing the number of sources "
            f"between restarts. {hint}",
        )
    topics = set(source_offsets(entries))
    if topics and topics != expected:
        h.add(
            "incompatible_topics",
            "error",
            f"the checkpoint reads topic(s) {', '.join(sorted(topics))} but the spec joins "
            f"{', '.join(sorted(expected))}: this checkpoint belongs to another spec (changing subscribed "
            f"topics is not allowed between restarts; see joinshift plan). {hint}",
        )
    n = conf.get("spark.sql.shuffle.partitions")
    if n and n.isdigit() and int(n) != spec.streaming.shuffle_partitions:
        h.add(
            "shuffle_partitions_fixed",
            "warning",
            f"the checkpoint's state has {n} partitions; the spec says streaming.shuffle_partitions="
            f"{spec.streaming.shuffle_partitions}, which Spark ignores while this checkpoint is used.",
        )
    provider = conf.get(STATE_STORE_PROVIDER)
    if provider and provider != STATE_STORE_PROVIDERS[spec.streaming.state_store]:
        kept = state_store_name(provider)
        h.add(
            "state_store_fixed",
            "warning",
            f"the checkpoint's state is in the {kept} store; the spec says streaming.state_store="
            f"{spec.streaming.state_store.value}, which Spark ignores while this checkpoint is used (joinshift "
            "replay rebuilds the window in a fresh one).",
        )
