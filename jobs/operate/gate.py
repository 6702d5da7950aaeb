"""The cut-over gate, pure core: stages, the daily SLO, and when a promotion may happen.

A pipeline moves through four stages, one promotion at a time, and can roll back from any:

* ``shadow``: the stream runs beside the batch join; nobody reads it (public view -> batch);
* ``canary``: the ``<pipeline>_canary`` view reads the stream, for the consumers chosen for it;
* ``cutover``: the public view ``<pipeline>`` reads the stream; the batch join keeps running as
  the fallback and the comparison;
* ``retired``: the batch DAG (``joinshift_daily``) is paused.

A day (ds) meets the SLO when no check failed: match rate within ``accuracy.tolerance_pp`` of
``accuracy.baseline``, unexplained misses at most ``cutover.max_unexplained_pp``, no lost left
event, p99 event -> output latency within ``budgets.output_latency`` (when set), at most
``health.max_restarts_per_day`` restarts. A promotion needs ``cutover.days_required``
consecutive days meeting it, all after the day the previous decision relied on (so each stage
earns its own days, and a rollback starts the count again), unless forced with a reason.

Everything here is plain values in and out; :mod:`jobs.operate.gate_measure` measures a day and
:mod:`jobs.operate.gate_store` keeps the evidence and decisions in Delta.

Example::

    checks = evaluate_day(measurements, Slo.of(spec))
    verdict = promotion("shadow", {ds: checks, ...}, after=None, slo=Slo.of(spec))
    verdict.allowed, verdict.message
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

from jobs.spec import JoinSpec, fmt_duration
from jobs.spec.shares import pct, within_tolerance
from jobs.storage.stream_runs import BACKLOG

STAGES = ("shadow", "canary", "cutover", "retired")
#: The batch DAG the ``retired`` stage pauses (and a rollback from it unpauses).
BATCH_DAG = "joinshift_daily"
#: What each view reads per stage: "batch" (the baseline's output), "stream", or nothing.
SERVING: dict[str, dict[str, str | None]] = {
    "shadow": {"public": "batch", "canary": None},
    "canary": {"public": "batch", "canary": "stream"},
    "cutover": {"public": "stream", "canary": "stream"},
    "retired": {"public": "stream", "canary": "stream"},
}
CHECKS = ("match_rate", "unexplained_misses", "lost_rows", "latency_p99", "restarts")
MET, FAILED, NOT_MEASURED = "met", "failed", "not_measured"


class GateRefused(ValueError):
    """A promotion or rollback the gate will not make; the message says why and what to do."""


@dataclass(frozen=True)
class Slo:
    """The day's SLO, read once from the spec (one threshold per rule)."""

    baseline: str
    tolerance_pp: float
    max_unexplained_pp: float
    max_restarts_per_day: int
    max_latency_s: float | None
    days_required: int

    @classmethod
    def of(cls, spec: JoinSpec) -> Slo:
        c = spec.cutover
        return cls(
            baseline=spec.accuracy.baseline,
            tolerance_pp=spec.accuracy.tolerance_pp,
            max_unexplained_pp=c.max_unexplained_pp,
            max_restarts_per_day=spec.health.max_restarts_per_day,
            max_latency_s=latency.total_seconds() if (latency := spec.budgets.output_latency) is not None else None,
            days_required=c.days_required,
        )


@dataclass(frozen=True)
class Measurements:
    """What the I/O shell measured for one ds; None: could not be measured (``notes`` says why)."""

    ds: date
    left_events: int | None = None
    stream_rate: float | None = None
    baseline_rate: float | None = None
    unexplained: int | None = None
    lost: int | None = None
    late_dropped: int | None = None
    latency_p99_s: float | None = None
    restarts: int | None = None
    #: how the stream output of the ds was produced ("backlog", "live", "replay-as-live"; None: unknown)
    stream_run: str | None = None
    notes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """One check of one ds: ``met``, ``failed`` or ``not_measured``, with the number and its limit."""

    ds: date
    check: str
    status: str
    value: float | None
    limit: float | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ds": str(self.ds)}


def _pp(v: float) -> str:
    return f"{v:+.2f} pp"


def evaluate_day(m: Measurements, slo: Slo) -> list[Check]:
    """The SLO's checks for one ds, in :data:`CHECKS` order.

    A check that could not be measured fails when its rule is set and cannot be verified without
    it (match rate, unexplained misses, lost rows, latency with a budget); the restart count is
    ``not_measured`` (not failed) when the stream is not supervised: no process, no restarts.
    """
    notes = dict(m.notes)
    out: list[Check] = []

    def add(check: str, status: str, value: float | None, limit: float | None, detail: str) -> None:
        out.append(Check(m.ds, check, status, value, limit, detail))

    if m.stream_rate is None or m.baseline_rate is None:
        add("match_rate", FAILED, None, -slo.tolerance_pp, notes.get("match_rate", "match rate not measured"))
    else:
        diff = 100 * (m.stream_rate - m.baseline_rate)
        # a backlog read in large micro-batches rarely fires the watermark: its rate says nothing
        # of what the live stream would do, so the day cannot count toward a promotion
        backlog = m.stream_run == BACKLOG
        ok = not backlog and within_tolerance(m.stream_rate, m.baseline_rate, slo.tolerance_pp)
        if backlog:
            detail = (
                f"match rate {_pp(diff)} is an upper bound (backlog run): run the day live or "
                f"with joinshift replay-as-live for a rate that counts"
            )
        elif ok:
            detail = f"match rate {_pp(diff)} vs {slo.baseline} ({pct(m.stream_rate)} vs {pct(m.baseline_rate)})"
        else:
            detail = f"match rate {diff:.2f} pp below {slo.baseline} (tolerance {slo.tolerance_pp:g})"
        add("match_rate", MET if ok else FAILED, round(diff, 4), -slo.tolerance_pp, detail)

    if m.unexplained is None or not m.left_events:
        note = notes.get("unexplained_misses", "unexplained misses not measured")
        add("unexplained_misses", FAILED, None, slo.max_unexplained_pp, note)
    else:
        pp = 100 * m.unexplained / m.left_events
        ok = pp <= slo.max_unexplained_pp + 1e-9
        add(
            "unexplained_misses",
            MET if ok else FAILED,
            round(pp, 4),
            slo.max_unexplained_pp,
            f"{m.unexplained} unexplained misses = {pp:.2f} pp of {m.left_events} left events"
            + ("" if ok else f" (limit {slo.max_unexplained_pp:g} pp)"),
        )

    if m.lost is None:
        add("lost_rows", FAILED, None, 0, notes.get("lost_rows", "lost rows not measured"))
    else:
        late = f"; {m.late_dropped} dropped by the watermark (counted)" if m.late_dropped else ""
        add(
            "lost_rows",
            MET if m.lost == 0 else FAILED,
            m.lost,
            0,
            ("no lost rows" if m.lost == 0 else f"{m.lost} landed left events in neither output nor a count") + late,
        )

    if m.latency_p99_s is None:
        why = notes.get("latency_p99", "latency not measured")
        add("latency_p99", NOT_MEASURED if slo.max_latency_s is None else FAILED, None, slo.max_latency_s, why)
    elif slo.max_latency_s is None:
        add("latency_p99", MET, m.latency_p99_s, None, f"p99 latency {fmt_duration(m.latency_p99_s)} (no budget set)")
    else:
        ok = m.latency_p99_s <= slo.max_latency_s
        add(
            "latency_p99",
            MET if ok else FAILED,
            m.latency_p99_s,
            slo.max_latency_s,
            f"p99 latency {fmt_duration(m.latency_p99_s)}"
            + (" within" if ok else " over")
            + f" budget {fmt_duration(slo.max_latency_s)}",
        )

    if m.restarts is None:
        add("restarts", NOT_MEASURED, None, slo.max_restarts_per_day, notes.get("restarts", "not supervised"))
    else:
        ok = m.restarts <= slo.max_restarts_per_day
        add(
            "restarts",
            MET if ok else FAILED,
            m.restarts,
            slo.max_restarts_per_day,
            f"{m.restarts} restarts" + ("" if ok else f" (restart storm: limit {slo.max_restarts_per_day} a day)"),
        )
    return out


def day_met(checks: Sequence[Check]) -> bool:
    return bool(checks) and not any(c.status == FAILED for c in checks)


def why_not(checks: Sequence[Check]) -> str:
    """The failed checks of a day, as one clause: ``match rate -2.10 pp below ...; 3 lost rows``.
    A reason several checks share (an input that is missing) is said once."""
    return "; ".join(dict.fromkeys(c.detail for c in checks if c.status == FAILED))


@dataclass(frozen=True)
class Streak:
    """Consecutive days meeting the SLO, counted back from the latest evaluated day after ``after``."""

    met: list[date]
    broken_by: date | None  # the day that ended the streak (failed), None if a gap or nothing did
    reason: str  # why the streak ended there ("" when it reached ``after`` or the first evaluated day)
    latest: date | None


def streak(days: Mapping[date, Sequence[Check]], after: date | None = None) -> Streak:
    """Count back from the latest evaluated ds (> ``after``): each met day one further back adds to
    the streak; the first failed day or missing day ends it."""
    evaluated = sorted(d for d in days if after is None or d > after)
    if not evaluated:
        return Streak([], None, "", None)
    latest = evaluated[-1]
    met: list[date] = []
    d = latest
    while d in days and (after is None or d > after):
        if not day_met(days[d]):
            return Streak(sorted(met), d, why_not(days[d]), latest)
        met.append(d)
        d -= timedelta(days=1)
    reason = "" if (after is not None and d <= after) or d < evaluated[0] else f"{d} not evaluated"
    return Streak(sorted(met), None, reason, latest)


def _span(days: Sequence[date]) -> str:
    if not days:
        return ""
    a, b = days[0], days[-1]
    if a == b:
        return f" ({a})"
    tail = f"{b.day:02d}" if (a.year, a.month) == (b.year, b.month) else str(b)
    return f" ({a}..{tail})"


@dataclass(frozen=True)
class Verdict:
    """Whether the next promotion may happen now, and the sentence that says why (not)."""

    stage: str
    to: str | None
    allowed: bool
    days_met: list[date]
    days_required: int
    message: str


def check_forced(force: bool, reason: str | None) -> None:
    """A forced promotion is recorded with why: without a reason it is refused."""
    if force and not (reason and reason.strip()):
        raise GateRefused("--force needs --reason TEXT (recorded with the decision)")


def next_stage(stage: str) -> str | None:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")
    i = STAGES.index(stage)
    return STAGES[i + 1] if i + 1 < len(STAGES) else None


def promotion(stage: str, days: Mapping[date, Sequence[Check]], after: date | None, slo: Slo) -> Verdict:
    """May ``stage`` be promoted one step, given the evaluated days after ``after``?"""
    to = next_stage(stage)
    s = streak(days, after)
    n, need = len(s.met), slo.days_required
    if to is None:
        return Verdict(stage, None, False, s.met, need, "already retired: the last stage; nothing to promote to")
    if n >= need:
        return Verdict(
            stage, to, True, s.met, need, f"{n} consecutive days meet the SLO{_span(s.met)}: {stage} -> {to} allowed"
        )
    msg = f"promotion to {to} needs {need} consecutive days meeting the SLO; {n} met{_span(s.met)}"
    if s.broken_by is not None:
        msg += f"; {s.broken_by} failed: {s.reason}"
    elif s.reason:
        msg += f"; {s.reason}"
    elif not days or s.latest is None:
        msg += "; no day evaluated" + (f" after {after}" if after else "") + " (joinshift gate evaluate --ds DAY)"
    return Verdict(stage, to, False, s.met, need, msg)


def rollback_target(stage: str, to: str | None = None) -> str:
    """The stage a rollback goes to: ``shadow`` by default, or any earlier stage named."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")
    target = to or "shadow"
    if target not in STAGES:
        raise GateRefused(f"--to {target}: not a stage; stages: {', '.join(STAGES)}")
    if STAGES.index(target) > STAGES.index(stage):
        raise GateRefused(f"--to {target} is after the current stage {stage}; a rollback goes back (promote goes on)")
    return target


def serving(stage: str) -> dict[str, str | None]:
    """What each view reads at ``stage``: "batch", "stream" or None (the view does not exist)."""
    if stage not in SERVING:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")
    return dict(SERVING[stage])


def batch_paused(stage: str) -> bool:
    """The batch DAG is paused only when the batch join is retired."""
    return stage == "retired"
