"""What Airflow tasks call: one function per task, spec path and ds in, a small summary out.

Each function opens (or reuses) the process's Spark session and returns JSON-friendly dicts,
which Airflow keeps as XCom and shows in the UI. DAG files stay wiring only. An empty spec path
means the default spec (:data:`jobs.spec.DEFAULT_SPEC`), defined once there.

DAGs chain by Airflow Assets: ``joinshift_daily`` updates ``joinshift_batch_outputs``,
``joinshift_stream`` ``joinshift_stream_output``; either schedules ``joinshift_compare``, which
compares every ds whose inputs are complete and updates ``joinshift_match_metrics`` naming those
days, which schedules ``joinshift_report`` for them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from datetime import UTC, date
from typing import Any, TypeVar

from jobs.spec import DEFAULT_WORKLOAD, JoinSpec, load_spec, spec_path
from jobs.spec.days import day_span, parse_day

log = logging.getLogger("joinshift.airflow_tasks")

#: The ``extra`` key of a simulation's per-slice log records: (slices done, slices total, slice end
#: epoch ms). A progress display attaches a logging handler to this module's logger to follow it.
SLICE_PROGRESS = "joinshift_slice"


Task = TypeVar("Task", bound=Callable[..., Any])


class ParamRefused(ValueError):
    """A DAG run's parameter its rule refuses: the message names the parameter."""


def _fails_fast(task: Task) -> Task:
    """A task whose spec, settings or parameters are wrong fails at once, with the one line that
    says what to fix (the CLI's) first in its log: a retry in 5-10 minutes would fail the same way.
    Everything else (a broker or a master down, an input not landed yet) keeps Airflow's retries."""
    from jobs.accuracy.grid import GridError
    from jobs.settings import SettingsError
    from jobs.spec import SpecError

    @functools.wraps(task)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return task(*args, **kwargs)
        except (ParamRefused, SpecError, SettingsError, GridError) as exc:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(str(exc)) from None

    return run  # type: ignore[return-value]


def _utc(ms: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def _spec(path: str | None) -> JoinSpec:
    return load_spec(spec_path(path or None))


def _spark(*, classic: bool = False):
    """The task's Spark session: a client of the Spark Connect server ``spark_remote`` names when
    it is set in the worker's environment, else a driver in the task's process. The streaming
    tasks ask for ``classic`` (a driver of their own: ``jobs.storage.spark``). Every task runs to
    its end (the continuous stream is a process of its own, ``joinshift stream``), so a driver a
    task starts runs the throughput collector."""
    from jobs.storage.spark import get_spark

    return get_spark("joinshift-airflow", classic=classic, throughput=True)


def _ds(ds: str | date) -> date:
    return ds if isinstance(ds, date) else date.fromisoformat(ds)


@_fails_fast
def land(spec: str, ds: str, side: str) -> dict:
    from jobs.steps.landing import land_ds

    result = asdict(land_ds(_spark(), _spec(spec), side, _ds(ds)))
    result["ds"] = str(result["ds"])
    return result


@_fails_fast
def batch(spec: str, ds: str, variant: str) -> dict:
    """Run one daily variant for the left ds that the landing of ``ds`` completes (``ds`` itself,
    or for ``batch_1d_2d`` and ``reference`` the day(s) before, as far as the window reaches)."""
    from jobs.join.variants import computable_ds
    from jobs.steps.batch import run_variant
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    join_spec, spark = _spec(spec), _spark()
    target = computable_ds(join_spec, variant, _ds(ds))
    left = (
        spark.read.format("delta").load(Tables.of(join_spec).landed("left"))
        if delta_io.table_exists(spark, Tables.of(join_spec).landed("left"))
        else None
    )
    if left is None or left.where(f"ds = '{target}'").limit(1).count() == 0:
        log.info("%s: no left events landed for ds=%s, nothing to join", variant, target)
        return {"variant": variant, "ds": str(target), "rows": 0, "skipped": "no left partition"}
    return {"variant": variant, "ds": str(target), "rows": run_variant(spark, join_spec, variant, target)}


@_fails_fast
def stream_increment(spec: str) -> dict:
    from jobs.steps.stream import run_increment
    from jobs.storage.kafka import bootstrap_servers

    return run_increment(_spark(classic=True), _spec(spec), bootstrap=bootstrap_servers())


@_fails_fast
def inputs_ready(spec: str, ds: str) -> bool:
    """Compare for ds may run once every batch variant for ds exists and the stream is done with
    the day: its watermark passed ds's end plus the window's upper bound, or it has read all
    that Kafka holds (a stream's matches are final once their records are read; only left-outer
    nulls wait for the watermark, and they do not count as matches)."""
    from jobs.join.variants import DAILY_VARIANTS
    from jobs.steps.batch import ready_variants
    from jobs.steps.landing import ds_bounds_ms
    from jobs.steps.stream import stream_lag, stream_watermark
    from jobs.storage.kafka import bootstrap_servers

    join_spec, day = _spec(spec), _ds(ds)
    if ready_variants(_spark(), join_spec, day) != list(DAILY_VARIANTS):
        return False
    wm = stream_watermark(join_spec)
    _, end_ms = ds_bounds_ms(day, join_spec.timezone)
    if wm is not None and wm >= end_ms + 1000 * join_spec.window.upper_seconds:
        return True
    lag = stream_lag(join_spec, bootstrap_servers())
    log.info("stream watermark %s, lag %s records", wm, lag)
    return lag == 0


@_fails_fast
def compare(spec: str, ds: str) -> list[dict]:
    from jobs.accuracy.compare import compare_ds

    rows = compare_ds(_spark(), _spec(spec), _ds(ds))
    return [{k: (str(v) if isinstance(v, date) else v) for k, v in r.items()} for r in rows]


@_fails_fast
def pending_compare_days(spec: str) -> list[str]:
    """Landed left days with no complete match metrics yet (what an asset-triggered compare does)."""
    from pyspark.sql import functions as F

    from jobs.join.variants import VARIANTS
    from jobs.steps.batch import landed_days
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    join_spec, spark = _spec(spec), _spark()
    tables = Tables.of(join_spec)
    done: set[date] = set()
    if delta_io.table_exists(spark, tables.match_metrics):
        rows = (
            delta_io.read_table(spark, tables.match_metrics)
            .groupBy("ds")
            .agg(F.countDistinct("variant").alias("n"))
            .collect()
        )
        done = {r.ds for r in rows if r.n >= len(VARIANTS)}
    return [str(d) for d in landed_days(spark, tables, "left") if d not in done]


@_fails_fast
def compare_ready(spec: str, ds: str | None) -> list[str]:
    """Compare ``ds``, or (no ds: an asset-triggered run) every pending day, when its inputs are
    complete; returns the days compared (the report's days)."""
    days = [ds] if ds else pending_compare_days(spec)
    compared = []
    for day in days:
        if inputs_ready(spec, day):
            compare(spec, day)
            compared.append(str(day))
        else:
            log.info("ds=%s: batch variants or the stream not complete yet; compared when they are", day)
    return compared


#: One day of one pipeline, as DAG runs pass it on: [spec path as the run was given it, ds].
Run = list[str]


def _extras(events: Mapping[object, Iterable[object]] | None) -> list[dict]:
    return [getattr(ev, "extra", None) or {} for evs in (events or {}).values() for ev in evs]


def compare_runs(spec: str, ds: str | None, events: Mapping[object, Iterable[object]] | None = None) -> list[Run]:
    """What ``joinshift_compare`` compares: ``ds`` of the run's spec (a run for a day), else the
    pending days of every spec the triggering asset events name (a batch join or a stream
    increment of that pipeline; an event that names none: the run's own spec)."""
    if ds:
        return [[spec, day] for day in compare_ready(spec, ds)]
    return [[each, day] for each in specs_of_events(spec, events) for day in compare_ready(each, None)]


def specs_of_events(spec: str, events: Mapping[object, Iterable[object]] | None) -> list[str]:
    """The specs the asset events name (``{"spec": ...}``); ``spec`` for an event naming none."""
    return sorted({e.get("spec", spec) for e in _extras(events)} or {spec})


def runs_to_do(spec: str, ds: str | None, events: Mapping[object, Iterable[object]] | None) -> list[Run]:
    """The pipeline days a gate or report run works on: its ds with its spec, else those the
    asset events that triggered it name (``{"runs": [[spec, ds], ...]}``, what compare wrote)."""
    if ds:
        return [[spec, str(ds)]]
    return [list(run) for run in sorted({(run[0], run[1]) for e in _extras(events) for run in e.get("runs", [])})]


def _log_slice(done: int, total: int, end_ms: int) -> None:
    log.info(
        "replay-as-live: slice %d/%d (arrivals up to %s)",
        done,
        total,
        _utc(end_ms),
        extra={SLICE_PROGRESS: (done, total, end_ms)},
    )


@_fails_fast
def publish_workload(spec: str, workload: str) -> dict:
    """Generate the workload and publish it into the spec's topics at once, as history."""
    from jobs.steps.simulate import arrival_days, publish_history
    from jobs.storage.kafka import bootstrap_servers
    from jobs.workload.generator import generate
    from jobs.workload.params import load_workload

    join_spec = _spec(spec)
    wl = generate(load_workload(spec_path(workload or DEFAULT_WORKLOAD)), join_spec)
    published = publish_history(join_spec, wl.records, bootstrap=bootstrap_servers())
    return {"published": published, "days": [str(d) for d in arrival_days(join_spec, wl.records)]}


@_fails_fast
def replay_as_live(spec: str, days: list[str] | None, slice_minutes: float) -> dict:
    """Replay the spec's topics as live over ``days`` (empty: every day they hold)."""
    from jobs.operate.gate_store import serves_stream
    from jobs.steps.replay_live import replay_as_live as run
    from jobs.storage.kafka import bootstrap_servers

    _slice(slice_minutes)
    spark, join_spec = _spark(classic=True), _spec(spec)
    if served := serves_stream(spark, join_spec):
        raise ParamRefused(served)
    result = run(
        spark,
        join_spec,
        bootstrap=bootstrap_servers(),
        days=[_ds(d) for d in days] if days else None,
        slice_minutes=slice_minutes,
        on_slice=_log_slice,
    )
    return result.as_dict()


@_fails_fast
def quality_gates(spec: str, ds: str) -> list[dict]:
    """Run the Great Expectations suites for ds, record them, fail the task if any gate failed."""
    from jobs.quality.gates import assert_gates, run_gates, write_gate_results

    join_spec, spark = _spec(spec), _spark()
    results = run_gates(spark, join_spec, _ds(ds))
    write_gate_results(spark, join_spec, _ds(ds), results)
    assert_gates(results)
    return [r.to_dict() if hasattr(r, "to_dict") else r.__dict__ for r in results]


@_fails_fast
def report(spec: str, ds: str) -> dict:
    """Build and publish the day's accuracy report (and the window recommendation)."""
    from jobs.report.assemble import publish

    files = publish(_spark(), _spec(spec), _ds(ds))
    return {"html": str(files.html), "status": files.status, "unavailable": list(files.unavailable)}


@_fails_fast
def supervise_poke(spec: str, watch: str, watch_s: float) -> tuple[bool, dict]:
    """One poke of the supervision sensor: adopt or start the continuous stream process, check
    it, restart it on exit or stall (backoff kept across pokes). Raises (so Airflow's failure
    callback alerts) when it gave up restarting or both streams are behind. Returns (the watch
    is over, a summary for XCom)."""
    from jobs.operate.supervisor import log_alert, supervise_step

    path = spec_path(spec or None)
    done, report = supervise_step(load_spec(path), spec_path=path, watch=watch, watch_s=watch_s, on_alert=log_alert)
    if report.gave_up or (report.last or {}).get("state") == "backlogged":  # this poke's state
        said = f"stream needs attention: {report.alerts[-1]['message']}"
        if report.alerts[-1]["kind"] == "refused":  # the spec or its checkpoint: a retry gets the same answer
            raise ParamRefused(said)
        raise RuntimeError(said)
    return done, {
        "checks": report.checks,
        "restarts": len(report.restarts),
        "states": report.states,
        "last": report.last,
        "pid": report.pid,
    }


@_fails_fast
def load_health(spec: str) -> dict:
    """Copy the supervisor's health samples and the join's per-micro-batch progress into the
    `stream_health` and `stream_progress` Delta tables (idempotent)."""
    from jobs.operate.health import load_health_table, load_progress_table

    join_spec, spark = _spec(spec), _spark()
    return {
        "health_samples": load_health_table(spark, join_spec),
        "micro_batches": load_progress_table(spark, join_spec),
    }


def _cutover(cutover: str):
    from jobs.operate.replay import parse_cutover

    try:
        return parse_cutover(cutover)
    except ValueError as exc:
        raise ParamRefused(str(exc)) from None


@_fails_fast
def replay_plan(spec: str, cutover: str) -> dict:
    """Where each stream's replay starts; fails naming the gap when Kafka no longer retains it."""
    from jobs.operate.replay import plan_replay
    from jobs.storage.kafka import bootstrap_servers

    return asdict(plan_replay(_spec(spec), _cutover(cutover), bootstrap_servers()))


@_fails_fast
def replay(spec: str, cutover: str) -> dict:
    """Rebuild the window into a fresh checkpoint (the old one kept) and own the output from cutover."""
    from jobs.operate.replay import replay as run
    from jobs.storage.kafka import bootstrap_servers

    return asdict(run(_spark(classic=True), _spec(spec), _cutover(cutover), bootstrap=bootstrap_servers()))


@_fails_fast
def gate_evaluate(spec: str, days: list[str]) -> list[dict]:
    """The cut-over gate's SLO for each day, recorded in ``gate_evidence``; one summary per day
    (whether it met the SLO, and if not why), and the stage and days met after it."""
    from jobs.operate import gate, gate_store

    join_spec, spark = _spec(spec), _spark()
    out = []
    for day in sorted(days):
        checks = gate_store.evaluate(spark, join_spec, _ds(day))
        out.append({"ds": str(day), "met": gate.day_met(checks), "why_not": gate.why_not(checks)})
    st = gate_store.status(spark, join_spec).as_dict()
    log.info("cut-over gate %s: stage %s; %s", join_spec.pipeline, st["stage"], st["message"])
    return out


def gate_evaluate_runs(runs: Iterable[Run]) -> list[dict]:
    """:func:`gate_evaluate` for each pipeline's days in ``runs``."""
    by_spec: dict[str, list[str]] = {}
    for spec, day in runs:
        by_spec.setdefault(spec, []).append(day)
    return [row for spec, days in sorted(by_spec.items()) for row in gate_evaluate(spec, days)]


@_fails_fast
def days_between(from_ds: str | None, to_ds: str | None) -> list[str]:
    """Every day from ``from_ds`` to ``to_ds`` (default: ``from_ds``); [] without either (every
    day held); by the CLI's rules for ``--from`` and ``--to``, named as the DAG's params."""

    def day(value: str | None, name: str) -> date | None:
        try:
            return parse_day(value) if value else None
        except ValueError as exc:
            raise ParamRefused(f"{name} {exc}") from None

    first, last = day(from_ds, "from_ds"), day(to_ds, "to_ds")
    try:
        return [str(d) for d in day_span(first, last, ("from_ds", "to_ds"))]
    except ValueError as exc:
        raise ParamRefused(str(exc)) from None


def _slice(minutes: float) -> None:
    from jobs.steps.replay_live import check_slice

    try:
        check_slice(minutes)
    except ValueError as exc:
        raise ParamRefused(f"slice_minutes {minutes:g}: {exc}") from None
