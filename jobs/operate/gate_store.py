"""The cut-over gate's I/O shell: evidence and decisions in Delta, the views, and the commands'
work (evaluate a day, status, promote, roll back).

* ``gate_evidence`` (Delta): one row per (ds, check): status, value, limit, detail, when;
  re-evaluating a day replaces its rows.
* ``gate_decisions`` (Delta, append only): every promotion and rollback: when, who, from, to, why,
  forced or not, the days met it relied on (``through_ds``), whether the batch DAG was paused.
  The current stage is the last decision's ``to_stage`` (``shadow`` before the first).
* ``<storage_root>/gate/<pipeline>/state.json`` (written through ``jobs.storage.fs``): the stage,
  the tables each view reads and the latest days, rewritten from the two tables after every gate
  command, for readers without Spark (the Airflow UI page, a consumer resolving the public view).

Views. There is no shared metastore here (a Derby-backed Hive metastore admits one process at a
time; the stream, Airflow tasks and the CLI are separate processes), so a view is the pointer in
the decisions table plus :func:`view`, which returns the table the pointer names as a DataFrame,
and :func:`register_views`, which makes it a temporary view of the session: ``<pipeline>``
(public) and ``<pipeline>_canary``.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.operate import gate
from jobs.operate.gate import Check, GateRefused, Slo, Verdict
from jobs.operate.gate_measure import measure_day
from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.storage import delta_io, fs
from jobs.storage.tables import Tables

EVIDENCE_SCHEMA = (
    "ds date, check string, status string, value double, limit double, detail string, evaluated_at timestamp"
)
DECISION_SCHEMA = (
    "decided_at timestamp, action string, from_stage string, to_stage string, by string, reason string, "
    "forced boolean, days_met int, through_ds date, batch_dag_paused boolean"
)
#: Days of evidence kept in ``state.json`` (the UI's "why not" reads the latest of them).
STATE_DAYS = 14
#: Pauses (True) or unpauses (False) the batch DAG; the CLI passes one that uses Airflow's DB.
PauseBatch = Callable[[bool], None]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user with no passwd entry
        return "unknown"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # Spark timestamps: UTC wall time


def read_days(spark: SparkSession, spec: JoinSpec, s: Settings | None = None) -> dict[date, list[Check]]:
    """Every evaluated ds's checks, from ``gate_evidence``."""
    path = Tables.of(spec, s).gate_evidence
    if not delta_io.table_exists(spark, path):
        return {}
    days: dict[date, list[Check]] = {}
    for r in delta_io.read_table(spark, path).collect():
        days.setdefault(r.ds, []).append(Check(r.ds, r.check, r.status, r.value, r.limit, r.detail))
    order = {c: i for i, c in enumerate(gate.CHECKS)}
    return {d: sorted(cs, key=lambda c: order.get(c.check, 99)) for d, cs in days.items()}


def read_decisions(spark: SparkSession, spec: JoinSpec, s: Settings | None = None) -> list[dict[str, Any]]:
    path = Tables.of(spec, s).gate_decisions
    if not delta_io.table_exists(spark, path):
        return []
    return [r.asDict() for r in delta_io.read_table(spark, path).orderBy("decided_at").collect()]


def _variant_table(spec: JoinSpec, kind: str | None, s: Settings | None) -> dict[str, str] | None:
    if kind is None:
        return None
    variant = "stream" if kind == "stream" else spec.accuracy.baseline
    return {"variant": variant, "table": Tables.of(spec, s).output(variant)}


@dataclass(frozen=True)
class GateStatus:
    pipeline: str
    stage: str
    verdict: Verdict
    days: dict[date, list[Check]]
    decisions: list[dict[str, Any]]
    serving: dict[str, dict[str, str] | None]

    def as_dict(self) -> dict[str, Any]:
        recent = sorted(self.days)[-STATE_DAYS:]
        return {
            "pipeline": self.pipeline,
            "stage": self.stage,
            "stages": list(gate.STAGES),
            "next": self.verdict.to,
            "promotion_allowed": self.verdict.allowed,
            "days_met": [str(d) for d in self.verdict.days_met],
            "days_required": self.verdict.days_required,
            "why_not": None if self.verdict.allowed else self.verdict.message,
            "message": self.verdict.message,
            "serving": self.serving,
            "batch_dag": gate.BATCH_DAG,
            "batch_dag_paused": gate.batch_paused(self.stage),
            "days": [
                {
                    "ds": str(d),
                    "met": gate.day_met(self.days[d]),
                    "why_not": gate.why_not(self.days[d]),
                    "checks": [c.as_dict() for c in self.days[d]],
                }
                for d in reversed(recent)
            ],
            "decisions": [
                {k: (str(v) if isinstance(v, (date, datetime)) else v) for k, v in d.items()}
                for d in self.decisions[-10:]
            ],
        }


def status(spark: SparkSession, spec: JoinSpec, s: Settings | None = None) -> GateStatus:
    """The stage, the next promotion's verdict, the evaluated days and the decisions."""
    decisions = read_decisions(spark, spec, s)
    now = _stage_of(decisions)
    after = decisions[-1]["through_ds"] if decisions else None
    days = read_days(spark, spec, s)
    verdict = gate.promotion(now, days, after, Slo.of(spec))
    serve = {name: _variant_table(spec, kind, s) for name, kind in gate.serving(now).items()}
    return GateStatus(spec.pipeline, now, verdict, days, decisions, serve)


def _stage_of(decisions: list[dict[str, Any]]) -> str:
    return decisions[-1]["to_stage"] if decisions else "shadow"


def stage(spark: SparkSession, spec: JoinSpec, s: Settings | None = None) -> str:
    """The pipeline's gate stage: the last decision's, ``shadow`` before the first."""
    return _stage_of(read_decisions(spark, spec, s))


def serves_stream(spark: SparkSession, spec: JoinSpec, s: Settings | None = None) -> str | None:
    """Why the pipeline's stream output may not be replaced from nothing (a replay-as-live trial
    deletes it): its public view reads it. None when nothing but the stream's own checks read it."""
    st = stage(spark, spec, s)
    if gate.serving(st)["public"] != "stream":
        return None
    return (
        f"{spec.pipeline} is at gate stage {st!r}: its public view reads the stream output a replay-as-live "
        "trial deletes and rebuilds; run the trial under another pipeline name (--as), or roll the gate back "
        "to shadow first (joinshift gate rollback)"
    )


def write_state(st: GateStatus, spec: JoinSpec, s: Settings | None = None) -> str:
    p = Tables.of(spec, s).gate_state()
    fs.write_text(p, json.dumps(st.as_dict(), indent=2, default=str))  # readers never see half a file
    return p


def _commits(spec: JoinSpec, s: Settings | None) -> tuple[int, int]:
    t = Tables.of(spec, s)
    return delta_io.latest_commit(t.gate_decisions), delta_io.latest_commit(t.gate_evidence)


def refresh_state(spark: SparkSession, spec: JoinSpec, s: Settings | None = None, attempts: int = 10) -> GateStatus:
    """Rewrite ``state.json`` from the two tables, again while a gate command committed meanwhile.

    Two gate commands at once (the DAG's evaluation and a promotion by hand) each write the file;
    one whose status was read before the other's decision could write last, leaving the old stage
    as the public view's pointer. A writer that finds a commit newer than its status rewrites, so
    the last to finish writes the latest. The file system's lock would not do: it may be S3."""
    for _ in range(attempts):
        before = _commits(spec, s)
        st = status(spark, spec, s)
        write_state(st, spec, s)
        if _commits(spec, s) == before:
            break
    return st


def evaluate(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> list[Check]:
    """Measure the ds, check it against the SLO, record the evidence (replacing an earlier
    evaluation of the same ds) and refresh ``state.json``."""
    checks = gate.evaluate_day(measure_day(spark, spec, ds, s), Slo.of(spec))
    now = _now()
    f = lambda v: None if v is None else float(v)  # noqa: E731
    rows = [(c.ds, c.check, c.status, f(c.value), f(c.limit), c.detail, now) for c in checks]
    df = spark.createDataFrame(rows, EVIDENCE_SCHEMA)
    delta_io.upsert(df, Tables.of(spec, s).gate_evidence, ["ds", "check"])
    refresh_state(spark, spec, s)
    return checks


def _read_for_decision(spark: SparkSession, spec: JoinSpec, s: Settings | None) -> tuple[GateStatus, int]:
    """The status a decision is made from, and the decisions table's commit it was read at (read
    again while a commit comes in between)."""
    path = Tables.of(spec, s).gate_decisions
    for _ in range(10):
        version = delta_io.latest_commit(path)
        st = status(spark, spec, s)
        if delta_io.latest_commit(path) == version:
            break
    return st, version


def _decide(
    spark: SparkSession,
    spec: JoinSpec,
    st: GateStatus,
    *,
    version: int,
    action: str,
    to: str,
    by: str | None,
    reason: str,
    forced: bool,
    pause_batch: PauseBatch | None,
    s: Settings | None,
) -> dict[str, Any]:
    paused = gate.batch_paused(to)
    # entering or leaving retired: the only stage the gate pauses the batch DAG in
    changes = pause_batch if paused != gate.batch_paused(st.stage) else None
    if changes is not None:
        changes(paused)
    through = max(st.days) if st.days else None
    row = (
        _now(),
        action,
        st.stage,
        to,
        by or _user(),
        reason,
        forced,
        len(st.verdict.days_met),
        through,
        paused,
    )
    df = spark.createDataFrame([row], DECISION_SCHEMA)
    path = Tables.of(spec, s).gate_decisions
    failure: BaseException | None = None
    try:
        # the one decision after commit `version` of the decisions table: Delta skips a write whose
        # transaction version is written already (another command decided since `st` was read) and
        # fails one that commits at the same moment as another's (its exception's class depends on
        # the Spark client: what landed is read back instead)
        df.write.format("delta").mode("append").option("txnAppId", f"joinshift-gate-decision-{spec.pipeline}").option(
            "txnVersion", version + 1
        ).save(path)
    except BaseException as exc:  # Ctrl-C included: the decision may have landed all the same
        failure = exc
    mine = {"decided_at": row[0], "action": action, "by": row[4], "to_stage": to}
    try:
        decisions: list[dict[str, Any]] | None = read_decisions(spark, spec, s)
    except Exception:
        if failure is None:  # written; only reading it back failed: the stage and the pause are this decision's
            raise
        decisions = None
    if decisions is None or not any(all(d.get(k) == v for k, v in mine.items()) for d in decisions):
        if changes is not None:  # the batch DAG as the stage that holds now (another's, or the old one)
            changes(gate.batch_paused(_stage_of(decisions) if decisions is not None else st.stage))
        if failure is not None and (decisions is None or delta_io.latest_commit(path) == version):
            raise failure  # nobody else decided: the write itself failed
        last = decisions[-1] if decisions else {}
        raise GateRefused(
            f"another gate command decided first ({last.get('action')} to {last.get('to_stage')} by "
            f"{last.get('by')}); see joinshift gate status, then decide again"
        )
    after = refresh_state(spark, spec, s)
    return {
        "action": action,
        "from": st.stage,
        "to": to,
        "forced": forced,
        "reason": reason,
        "serving": after.serving,
        "batch_dag_paused": paused,
    }


def promote(
    spark: SparkSession,
    spec: JoinSpec,
    *,
    force: bool = False,
    reason: str | None = None,
    by: str | None = None,
    pause_batch: PauseBatch | None = None,
    s: Settings | None = None,
) -> dict[str, Any]:
    """One stage on, when the SLO has held for the required days (or forced, with a reason).

    Raises :class:`GateRefused` with the verdict's sentence otherwise."""
    st, version = _read_for_decision(spark, spec, s)
    v = st.verdict
    if v.to is None:
        raise GateRefused(v.message)
    gate.check_forced(force, reason)
    if not v.allowed and not force:
        raise GateRefused(v.message)
    why = reason or v.message
    if force and not v.allowed:
        why = f"forced: {reason} ({v.message})"
    return _decide(
        spark, spec, st, version=version, action="promote", to=v.to, by=by, reason=why,
        forced=force and not v.allowed,
        pause_batch=pause_batch, s=s,
    )  # fmt: skip


def rollback(
    spark: SparkSession,
    spec: JoinSpec,
    *,
    to: str | None = None,
    reason: str | None = None,
    by: str | None = None,
    pause_batch: PauseBatch | None = None,
    s: Settings | None = None,
) -> dict[str, Any]:
    """Back to ``shadow`` (or the earlier stage named): the public view reads the batch table again
    and, leaving ``retired``, the batch DAG is unpaused. Safe to repeat (from ``shadow`` it records
    the decision and changes nothing)."""
    st, version = _read_for_decision(spark, spec, s)
    target = gate.rollback_target(st.stage, to)
    return _decide(
        spark, spec, st, version=version, action="rollback", to=target, by=by, reason=reason or "rollback",
        forced=False,
        pause_batch=pause_batch, s=s,
    )  # fmt: skip


def view(spark: SparkSession, spec: JoinSpec, name: str = "public", s: Settings | None = None) -> DataFrame:
    """The rows the view ``name`` ("public" or "canary") serves at the current stage."""
    st = status(spark, spec, s)
    if name not in st.serving:
        raise GateRefused(f"view must be 'public' or 'canary', not {name!r}")
    target = st.serving[name]
    if target is None:
        raise GateRefused(f"{spec.pipeline}: no canary view at stage {st.stage} (it starts at canary)")
    return delta_io.read_table(spark, target["table"])


def register_views(spark: SparkSession, spec: JoinSpec, s: Settings | None = None) -> dict[str, str]:
    """Temporary views of this session: ``<pipeline>`` and (from canary on) ``<pipeline>_canary``;
    a stale canary view is dropped. Returns view name -> variant served."""
    st = status(spark, spec, s)
    out = {}
    for name, target in st.serving.items():
        view_name = spec.pipeline if name == "public" else f"{spec.pipeline}_canary"
        if target is None:
            spark.catalog.dropTempView(view_name)
            continue
        delta_io.read_table(spark, target["table"]).createOrReplaceTempView(view_name)
        out[view_name] = target["variant"]
    return out
