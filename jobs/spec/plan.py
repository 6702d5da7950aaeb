"""Restart planning: can a changed join spec restart from the running checkpoint?

Compares the deployed spec with a proposed one field by field and says, per changed field, whether
the streaming join may restart from its checkpoint, may restart with a caveat, or needs a fresh
checkpoint and a replay from Kafka. Example::

    joinshift plan --deployed deployed.yaml --proposed proposed.yaml          # table
    joinshift plan --deployed deployed.yaml --proposed proposed.yaml --json   # for scripts

Exit code 0: nothing to do, or restart from the checkpoint ("none" / "reuse_checkpoint");
3: a fresh checkpoint and a replay are needed ("fresh_checkpoint_and_replay"); 2: a spec is invalid.

Grounding (why each rule is what it is):

* Spark's Structured Streaming programming guide, "Recovery Semantics after Changes in a Streaming
  Query": changing the number or type of input sources is *not allowed*; changing subscribed Kafka
  topics is "generally not allowed as the results are unpredictable"; adding, removing or changing
  rate limits (``maxOffsetsPerTrigger``) *is allowed*; for a stream-stream join "changes in the
  schema or equi-joining columns are not allowed. Changes in join type (outer or inner) are not
  allowed. Other changes in the join condition are ill-defined"; changes to the code of a
  ``foreach``/``foreachBatch`` sink are allowed, with semantics that depend on the code.
  ``spark.sql.shuffle.partitions`` of a stateful query is taken from the checkpoint (the state is
  partitioned by it), so a new value is silently ignored on restart.
* The paper (Facebook, "Providing Streaming Joins as a Service", VLDB 2018) §4.2: an update must
  keep the join operator's *state* format and the wire format compatible; the join equality must be
  preserved; new attributes may only be appended because state rows are positional. Otherwise the
  user creates a new view (here: a fresh checkpoint) knowing in-flight state is discarded. §6.1: the
  join window is rebuilt by *replaying* the input from the message bus (here: Kafka, which keeps our
  topics forever), which is the replay path a fresh checkpoint takes.

What the join keeps as state here (``jobs.join.conditions.join_streams``): per side, every column of the
side's schema plus arrival time, Kafka partition and offset (and ``ds`` on the left), keyed by the
join key. Cardinality 1-to-1 is *not* state: it is applied in the ``foreachBatch`` sink (first
arrived match per micro-batch, then an insert-only MERGE keyed by the left id).
"""

from __future__ import annotations

import io
import json
import textwrap
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from jobs.spec import JoinSpec

# ------------------------------------------------------------------------------- vocabulary

#: Plan actions, from least to most disruptive.
NONE, REUSE, FRESH = "none", "reuse_checkpoint", "fresh_checkpoint_and_replay"
ACTIONS = (NONE, REUSE, FRESH)

#: Per-field effects. ``report_only`` fields do not touch the streaming job at all.
REPORT_ONLY = "report_only"
REUSE_OK = "reuse_checkpoint"
REUSE_WARN = "reuse_with_warning"
NEEDS_FRESH = "fresh_checkpoint_and_replay"
EFFECTS = (REPORT_ONLY, REUSE_OK, REUSE_WARN, NEEDS_FRESH)

#: Exit codes of the CLI, so scripts can branch: 0 restart as is, 3 fresh + replay, 2 bad input.
EXIT_OK, EXIT_INVALID, EXIT_FRESH = 0, 2, 3

_GUIDE = "Spark SS guide, Recovery Semantics after Changes"


@dataclass(frozen=True)
class FieldChange:
    """One changed spec field: the values, what it means for the checkpoint, and why."""

    field: str
    old: Any
    new: Any
    effect: str
    reason: str


@dataclass(frozen=True)
class Plan:
    action: str
    changes: list[FieldChange] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_FRESH if self.action == FRESH else EXIT_OK

    @property
    def warnings(self) -> list[FieldChange]:
        return [c for c in self.changes if c.effect == REUSE_WARN]

    @property
    def blocking(self) -> list[FieldChange]:
        """The changes that force a fresh checkpoint."""
        return [c for c in self.changes if c.effect == NEEDS_FRESH]

    def steps(self) -> list[str]:
        """What an operator does next, in order."""
        if self.action == NONE:
            if self.changes:
                return ["No restart needed: only report settings changed; deploy the new spec."]
            return ["Nothing changed."]
        if self.action == REUSE:
            out = [
                "Stop the streaming join, deploy the new spec, restart it: it resumes from its checkpoint (no replay)."
            ]
            if self.warnings:
                out.append(
                    "Read the warnings above: the restart is allowed, but "
                    + ", ".join(c.field for c in self.warnings)
                    + " change what the job produces from now on (rows already written are not rewritten)."
                )
            return out
        return [
            "Pick the cut-over T, the instant from which the new spec owns the output (e.g. now), and check Kafka "
            "still holds what the rebuild reads: joinshift replay --spec <proposed spec> --cutover <T> --dry-run.",
            "Rebuild from Kafka: joinshift replay --spec <proposed spec> --cutover <T> (or the joinshift_replay DAG). "
            "It stops the supervised stream, keeps the old checkpoint as <checkpoint>.bak-<UTC> and builds a fresh "
            "one from what a live run's state at T reaches back to (paper §6.1: the window is rebuilt by "
            "replaying the input).",
            "Check the new checkpoint (joinshift checkpoint validate / inspect --spec <proposed spec>: lag per "
            "partition), then deploy the proposed spec: until then a restart with the old spec refuses the new "
            "checkpoint. Step by step: joinshift runbook change_the_window.",
            "Rows written under the old spec are not removed by an insert-only replay: replay into a new "
            "output table, or rebuild the affected ds partitions, if old rows are no longer correct "
            "(window, join type, keys or schema changed).",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "exit_code": self.exit_code,
            "changes": [asdict(c) for c in self.changes],
            "steps": self.steps(),
        }

    def render(self, width: int = 110) -> str:
        """A plain-text report: the action, a table of changes, reasons, next steps."""
        lines = [f"Restart plan: {self.action}"]
        if not self.changes:
            lines.append("No spec field changed.")
        else:
            table = Table("field", "old", "new", "effect", box=box.SIMPLE_HEAD, pad_edge=False)
            for c in self.changes:
                table.add_row(c.field, _short(c.old), _short(c.new), c.effect)
            buf = io.StringIO()
            Console(file=buf, width=width, color_system=None, highlight=False).print(table)
            lines += ["", "\n".join(x.rstrip() for x in buf.getvalue().splitlines()).strip("\n"), "", "Why:"]
            for c in self.changes:
                lines += textwrap.wrap(f"- {c.field} [{c.effect}]: {c.reason}", width=width, subsequent_indent="    ")
        lines += ["", "Next steps:"]
        lines += [
            textwrap.fill(f"{i}. {s}", width=width, subsequent_indent="   ") for i, s in enumerate(self.steps(), 1)
        ]
        return "\n".join(lines)


def _short(v: Any, limit: int = 32) -> str:
    s = "(absent)" if v is None else (v if isinstance(v, str) else json.dumps(v))
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ------------------------------------------------------------------------------- the rules

#: (field pattern, effect, reason). First match wins; ``{field}`` is the changed field's path;
#: a pattern starting with ``side.`` applies to ``left.`` and ``right.``.
RULES: list[tuple[str, str, str]] = [
    (
        "pipeline",
        NEEDS_FRESH,
        "{field} names the checkpoint and table folders (<root>/checkpoints/<pipeline>/...): a new name is a new "
        "query with no checkpoint and empty tables, so it starts fresh and must replay Kafka to fill them.",
    ),
    (
        "side.topic",
        NEEDS_FRESH,
        "{field} is a source's identity: the checkpoint's offsets are per topic-partition of the old topic. "
        f"{_GUIDE}: changes to subscribed topics are generally not allowed (results unpredictable). "
        "Start a fresh checkpoint and replay the new topic from its earliest offset.",
    ),
    (
        "side.schema",
        NEEDS_FRESH,
        "{field}: the column order changed. The join buffers whole rows as state and Spark checks state schemas "
        "ignoring names, so a reorder of same-typed columns could even restart and read values into the wrong "
        "columns (paper §4.2: state is positional). Fresh checkpoint and replay.",
    ),
    (
        "side.schema.*",
        NEEDS_FRESH,
        "{field}: the join buffers every schema column of both sides as state, so adding (even a nullable "
        "payload column), removing or retyping a column changes the join's state schema. "
        f"{_GUIDE}: changes in the schema of a stream-stream join are not allowed (Spark 4.2 refuses the "
        "restart with STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE, checked); unlike Puma (paper §4.2), Spark "
        "cannot append a column to existing state.",
    ),
    (
        "side.key",
        NEEDS_FRESH,
        "{field} is the equi-join column set, i.e. the state store's key: "
        f"{_GUIDE}: changes in equi-joining columns are not allowed; paper §4.2: the join equality must be "
        "preserved across updates (it decides the sharding of state).",
    ),
    (
        "side.event_time",
        NEEDS_FRESH,
        "{field} is the watermark column and part of the join's time-range condition; buffered rows and their "
        "eviction were computed on the old column, so the state is meaningless for the new one. Fresh "
        "checkpoint and replay.",
    ),
    (
        "window.lower",
        NEEDS_FRESH,
        "{field} is part of the join condition, which decides what the stateful join buffers and when it evicts "
        f"and emits. {_GUIDE}: other changes in the join condition are ill-defined: Spark 4.2 restarts "
        "(checked), but rows evicted under the old bound are gone (a wider window silently misses matches) "
        "and left rows already emitted as non-matches stay so. Fresh checkpoint and replay to get the new "
        "window's exact result.",
    ),
    (
        "window.upper",
        NEEDS_FRESH,
        "{field} is part of the join condition, which decides what the stateful join buffers and when it evicts "
        f"and emits. {_GUIDE}: other changes in the join condition are ill-defined: Spark 4.2 restarts "
        "(checked), but rows evicted or left rows already emitted as non-matches under the old bound stay as "
        "they were. Fresh checkpoint and replay to get the new window's exact result.",
    ),
    (
        "join.predicate",
        NEEDS_FRESH,
        "{field} is part of the join condition (key AND window AND predicate), like the window: it decides "
        f"which buffered rows match. {_GUIDE}: other changes in the join condition are ill-defined: rows already "
        "matched, evicted or emitted as non-matches under the old predicate stay as they were. Fresh checkpoint "
        "and replay to get the new predicate's exact result.",
    ),
    (
        "join.type",
        NEEDS_FRESH,
        f"{{field}} (inner vs left outer) changes the stateful join operator: {_GUIDE}: changes in join type "
        "(outer or inner) are not allowed. Fresh checkpoint and replay.",
    ),
    (
        "output_table",
        NEEDS_FRESH,
        "{field}: the new output table starts empty. Reusing the checkpoint (allowed for a foreachBatch sink) "
        "would write only batches after the restart, so the new table would lack every row already committed "
        "and the rows of left events still in state. Replay from a fresh checkpoint into it (the sink dedupes by "
        "its keys). Alternative without replay: copy the old table to the new name first, then restart from the "
        "checkpoint.",
    ),
    (
        "join.cardinality",
        REUSE_WARN,
        "{field} is applied in the foreachBatch sink (1-to-1: first-arrived match per micro-batch, then an "
        "insert-only MERGE keyed by the left id), not in the stateful join, whose state and schema are the same "
        f"for both; {_GUIDE}: changing foreachBatch sink code is allowed. Reusable, but rows already written keep "
        "the old cardinality: 1-to-n -> 1-to-1 leaves past left ids with several rows; 1-to-1 -> 1-to-n cannot "
        "recover matches the sink already dropped. Replay into a new output table if history must be uniform.",
    ),
    (
        "side.watermark_delay",
        REUSE_WARN,
        "{field}: Spark allows changing watermark delays between restarts (the delay is not in the state "
        "schema; the checkpoint keeps the current watermark; a Spark 4.2 restart with other delays runs, "
        "checked). It changes which late rows are dropped and when state is evicted and left non-matches are "
        "emitted: a shorter delay drops more late rows at once; a longer one only helps once event time "
        "advances, because Spark's watermark never moves back and rows already evicted are gone.",
    ),
    (
        "streaming.shuffle_partitions",
        REUSE_WARN,
        "{field} is fixed by the checkpoint: the state is partitioned by it and Spark restores "
        "spark.sql.shuffle.partitions from the checkpoint's offset log, ignoring the new value. Reusing is safe, "
        "but the change has no effect; it only applies with a fresh checkpoint and replay.",
    ),
    (
        "streaming.state_store",
        REUSE_WARN,
        "{field} is fixed by the checkpoint: Spark restores the state store (spark.sql.streaming.stateStore."
        "providerClass) from the checkpoint's offset log, ignoring the new value, and one store cannot read "
        "the other's files. Reusing is safe, but the change has no effect; it only applies with a fresh "
        "checkpoint and replay.",
    ),
    (
        "timezone",
        REUSE_WARN,
        "{field} changes how arrival times map to ds partitions (Hive-style, midnight in this zone). Reusable "
        "(ds is a date either way), but rows buffered in state keep the old zone's ds, output after the restart "
        "uses the new one, so partitions around the switch shift and stream-vs-batch comparisons of those days "
        "are off until the landed batch tables are rebuilt in the same zone.",
    ),
    (
        "timestamp_validity.*",
        REUSE_WARN,
        "{field} is a parse rule applied before the join (paper §6.7). Reusable, but it changes which records "
        "are quarantined instead of joined from now on; records already quarantined or joined stay as they are.",
    ),
    (
        "unknown_fields",
        REUSE_WARN,
        "{field} is a parse rule applied before the join. Reusable, but it changes which records are "
        "quarantined (unexpected JSON fields) from now on; earlier records are not re-examined.",
    ),
    (
        "side.id",
        REUSE_WARN,
        "{field}: the id column is in the state either way (the schema did not change), so the checkpoint is "
        "reusable; but it is the sink's dedupe key (1-to-1 MERGE, replays) and the null_id parse rule, so "
        "rows written before and after the restart are keyed differently.",
    ),
    (
        "side.format.id_from",
        REUSE_WARN,
        "{field}: the id is made from other columns now; the state and the sink's dedupe key keep the ids "
        "made the old way, so a record read before and after the restart can be counted twice. Reusable, "
        "but replay from a point after the last old output (joinshift replay) if that matters.",
    ),
    (
        "side.format.encoding",
        REUSE_WARN,
        "{field}: how the topic's values are written (JSON or Avro). The state holds parsed rows either way, so "
        "the checkpoint is reusable, but the stream continues at its offsets and reads every value from there in "
        "the new encoding: values still unread in the old one are quarantined (malformed_avro / malformed_json), "
        "as is every old value a landing re-run reads. Restart where the producers switched, or publish the new "
        "encoding to a new topic (a topic change needs a fresh checkpoint and replay).",
    ),
    (
        "side.format.avro.schemas.*",
        REUSE_WARN,
        "{field}: the writer schema of a registry id (Confluent framing). Adding an id is safe: values written "
        "with it decode from now on. Changing or removing one changes how values with that id decode from now "
        "on (a removed id's values are quarantined as malformed_avro); values already read are not re-read.",
    ),
    (
        "side.format.avro*",
        REUSE_WARN,
        "{field} changes how Avro values decode (writer schema, framing). Reusable (the state holds parsed rows), "
        "but values read from now on may decode into other fields or be quarantined as malformed_avro; values "
        "already read are not re-read. The planner compares schema file paths, not the files' contents.",
    ),
    (
        "side.format.*",
        REUSE_WARN,
        "{field} is a parse rule applied before the join (how the topic's records are read). Reusable, but it "
        "changes which records parse (and their times) from now on; earlier records are not re-read.",
    ),
    (
        "streaming.engine",
        NEEDS_FRESH,
        "{field}: the two engines keep different state (Spark's join buffers per side, the paced operator's "
        "per-key buffers) and read Kafka through different sources, so neither can continue the other's "
        "checkpoint. Fresh checkpoint and replay.",
    ),
    (
        "corrections.*",
        NEEDS_FRESH,
        "{field}: with corrections the output table has two more columns (revision, amended_at) and the "
        "paced operator keeps non-matches in state for the horizon; a table and a state made without them "
        "cannot take them. Fresh checkpoint and replay into a new output.",
    ),
    (
        "streaming.paced.blocks",
        NEEDS_FRESH,
        "{field}: the paced operator keeps each join key's buffers in the block of its shard its hash falls in; "
        "with another number of blocks a key's buffers would sit in a block that no longer holds it. Fresh "
        "checkpoint and replay.",
    ),
    (
        "streaming.paced.shards",
        NEEDS_FRESH,
        "{field}: the paced operator keeps each join key's buffers in the shard its hash falls in; with another "
        "number of shards a key's buffers would sit in a shard that no longer holds it. Fresh checkpoint and replay.",
    ),
    (
        "streaming.paced.*",
        REUSE_WARN,
        "{field} is a rule of the paced engine's pacing or per-key caps (paper §5.2, §6.6): not part of its "
        "state, so the checkpoint is reusable; it applies from the next micro-batch on (events already buffered "
        "or let go stay as they are). The native engine does not read it.",
    ),
    (
        "streaming.trigger_interval",
        REUSE_OK,
        "{field} only sets when micro-batches start; it is not stored in the checkpoint. Reusable.",
    ),
    (
        "streaming.max_offsets_per_trigger",
        REUSE_OK,
        f"{{field}} is the Kafka rate limit (maxOffsetsPerTrigger); {_GUIDE}: adding, removing or changing rate "
        "limits is allowed. Reusable.",
    ),
    (
        "side.name",
        REUSE_OK,
        "{field} is a label (reports, the quarantine table's stream column); the streaming join does not "
        "depend on it. Reusable.",
    ),
    (
        "side.table",
        REUSE_OK,
        "{field} is the landed Delta table the landing job and the batch baselines use; the streaming join "
        "reads Kafka, not this table. Reusable (rebuild the batch baselines if you compare against them).",
    ),
    (
        "side.batch_table*",
        REPORT_ONLY,
        "{field} is the batch job's own daily table, which the batch baselines read; the streaming job does not "
        "use it. Run `joinshift batch` again for the days you compare.",
    ),
    (
        "accuracy.*",
        REPORT_ONLY,
        "{field} is read by compare, gates and recommendation only; the streaming job does not use it.",
    ),
    (
        "health.*",
        REPORT_ONLY,
        "{field} is a health threshold (`joinshift health`, the UI, the supervisor); the streaming job does not "
        "use it.",
    ),
    (
        "budgets.*",
        REPORT_ONLY,
        "{field} is read by the recommendation and the cut-over gate only; the streaming job does not use it.",
    ),
    (
        "cutover.*",
        REPORT_ONLY,
        "{field} is the cut-over gate's SLO (`joinshift gate`); the streaming job does not use it.",
    ),
]

_UNKNOWN = (
    "{field} is not known to the planner; treated as needing a fresh checkpoint to be safe. "
    "Add a rule to jobs/spec/plan.py."
)


def _matches(pattern: str, path: str) -> bool:
    """fnmatch, where a leading ``side.`` stands for ``left.`` or ``right.``."""
    if pattern.startswith("side."):
        return any(fnmatchcase(path, f"{side}.{pattern[5:]}") for side in ("left", "right"))
    return fnmatchcase(path, pattern)


def _classify(path: str) -> tuple[str, str, str]:
    """(matched pattern, effect, reason) of a changed field path."""
    for pattern, effect, reason in RULES:
        if _matches(pattern, path):
            return pattern, effect, reason.format(field=path)
    return "", NEEDS_FRESH, _UNKNOWN.format(field=path)


def _as_data(spec: JoinSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True)


def _diff(old: Any, new: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in list(old) + [k for k in new if k not in old]:
            _diff(old.get(k), new.get(k), f"{path}.{k}" if path else k, out)
        if path.endswith(".schema") and set(old) == set(new) and list(old) != list(new):
            out.append((path, list(old), list(new)))  # same columns, new order
        return
    if old != new:
        out.append((path, old, new))


def plan(deployed: JoinSpec, proposed: JoinSpec) -> Plan:
    """Compare two specs; the action is the most disruptive effect of any changed field."""
    diffs: list[tuple[str, Any, Any]] = []
    _diff(_as_data(deployed), _as_data(proposed), "", diffs)
    changes = []
    for path, old, new in diffs:
        pattern, effect, reason = _classify(path)
        if pattern == "side.schema.*":
            what = "added" if old is None else "removed" if new is None else f"retyped {old} -> {new}"
            reason = reason.replace(f"{path}:", f"{path}: column {what};", 1)
        if pattern == "side.format.avro.schemas.*" and old is None:  # a new id: nothing decodes differently
            effect = REUSE_OK
        changes.append(FieldChange(path, old, new, effect, reason))
    if any(c.effect == NEEDS_FRESH for c in changes):
        action = FRESH
    elif any(c.effect in (REUSE_OK, REUSE_WARN) for c in changes):
        action = REUSE
    else:
        action = NONE
    return Plan(action, changes)


# ------------------------------------------------------------------------------- CLI
