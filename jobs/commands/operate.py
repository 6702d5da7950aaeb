"""Command bodies of the operations wing: checkpoint, replay, supervise, health, runbook, gate,
the local services (the embedded Kafka broker, the Spark Connect server the short steps share),
and the settings in effect."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from jobs.commands.common import (
    EXIT_USAGE,
    UserError,
    _bootstrap,
    _console,
    _ds_range,
    _load_spec,
    _print_json,
    _service_action,
    _spark,
)


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Exit 1 when the checkpoint is broken (validate, inspect) or cannot be read."""
    import logging

    from jobs.operate.checkpoint import backup_stopped, expected_query_id, inspect_checkpoint, render_inspection
    from jobs.operate.checkpoint_validate import validate_checkpoint
    from jobs.storage.tables import Tables

    spec = _load_spec(args.spec)
    tables = Tables.of(spec)
    path = args.checkpoint or tables.checkpoint(args.query)
    if args.action == "backup":
        target, stopped = backup_stopped(spec, path, stop=args.stop)
        if args.json:
            print(json.dumps({"backup": str(target), "stopped_pid": stopped}))
        else:
            print(f"backed up {path} to {target}")
            if stopped is not None:
                print(
                    f"stopped stream pid {stopped} for the copy: a running supervisor starts it again at its next "
                    "check (joinshift supervise, or the joinshift_supervise DAG, if none runs)"
                )
        return 0
    if args.action == "validate":
        expected = None if args.checkpoint else expected_query_id(tables.progress_log(args.query))
        health = validate_checkpoint(path, spec=spec, expected_query_id=expected, spec_arg=args.spec)
        print(json.dumps(health.to_dict(), indent=2) if args.json else health.render())
        return 0 if health.ok else 1
    try:
        bootstrap: str | None = _bootstrap(check=False)
    except Exception as e:  # no broker: inspect the checkpoint anyway, lag "unknown"
        logging.getLogger("joinshift.checkpoint").warning("Kafka lag unknown: %s", e)
        bootstrap = None
    from jobs.storage import fs

    spark = _spark("checkpoint-inspect") if fs.is_dir(path) else None
    info = inspect_checkpoint(spark, path, bootstrap, spec=spec)
    if bootstrap is None:
        info["kafka"]["reason"] = "no Kafka broker running (start it with `joinshift kafka start`)"
    print(json.dumps(info, indent=2, default=str) if args.json else render_inspection(info))
    return 0 if info["health"]["ok"] else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from jobs.operate.replay import parse_cutover, plan_replay, replay

    try:
        cutover = parse_cutover(args.cutover)
    except ValueError as e:
        raise UserError(f"--{e}", EXIT_USAGE) from None
    spec = _load_spec(args.spec)
    if args.dry_run:
        _print_json(asdict(plan_replay(spec, cutover, _bootstrap())))
    else:
        _print_json(asdict(replay(_spark("replay", classic=True), spec, cutover, bootstrap=_bootstrap())))
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    from jobs.operate.process import StreamProcess
    from jobs.operate.supervisor import supervise
    from jobs.spec import spec_path

    path = str(spec_path(args.spec))
    spec = _load_spec(args.spec)
    if args.stop:
        proc = StreamProcess(path, spec)
        if proc.find():
            proc.stop()
        return 0
    report = supervise(
        spec,
        spec_path=path,
        checks=args.checks,
        interval_s=args.interval,
        stall_after_s=args.stall_after,
        trigger_interval=args.trigger_interval,
    )
    _print_json(report.as_dict())
    return 1 if report.gave_up else 0


def cmd_health(args: argparse.Namespace) -> int:
    """Exit 1 when a value is beyond its threshold (a warning); unknown values do not fail."""
    from jobs.operate.stream_health import snapshot
    from jobs.report.health_view import render_health

    spec = _load_spec(args.spec)
    h = snapshot(spec, kafka_timeout_s=args.kafka_timeout)
    print(json.dumps(h.as_dict(), indent=2, default=str) if args.json else render_health(h))
    return 1 if h.status == "warn" else 0


def cmd_runbook(args: argparse.Namespace) -> int:
    from jobs.operate import runbooks

    try:
        text = runbooks.render(args.name, args.spec)
    except ValueError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None
    if args.commands:
        for c in runbooks.commands(text):
            print(c.line + (f"  # exit {c.expect_exit}" if c.expect_exit else ""))
    else:
        print(text)
    return 0


def _set_batch_dag_paused(paused: bool) -> None:
    """Pause (the batch join retired) or unpause the batch DAG in Airflow's metadata DB, as
    `airflow dags pause` does: the Airflow that AIRFLOW_HOME names, with its own configuration
    (its airflow.cfg's database); without one, the project's local Airflow."""
    import os

    from jobs.operate.gate import BATCH_DAG

    if "AIRFLOW_HOME" not in os.environ:  # no Airflow of the user's: the embedded default's
        from jobs.local.airflow_env import apply_airflow_env

        apply_airflow_env()
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        dag = session.get(DagModel, BATCH_DAG)
        if dag is None:
            raise UserError(
                f"{BATCH_DAG} is not in Airflow's metadata DB yet (let Airflow parse dags/, e.g. "
                "`joinshift airflow dags reserialize`); nothing changed"
            )
        dag.is_paused = paused


def cmd_gate(args: argparse.Namespace) -> int:
    """The cut-over gate: status, evaluate a day, promote, roll back, resolve a view."""
    from jobs.operate import gate_store
    from jobs.operate.gate import GateRefused, check_forced, day_met, why_not

    spec = _load_spec(args.spec)
    try:
        check_forced(getattr(args, "force", False), getattr(args, "reason", None))  # before Spark starts
        spark = _spark("gate")
        if args.gate_action == "evaluate":
            days = {ds: gate_store.evaluate(spark, spec, ds) for ds in _ds_range(args)}
            if args.json:
                _print_json({str(d): [c.as_dict() for c in cs] for d, cs in days.items()})
            for ds, checks in days.items():
                if not args.json:
                    print(f"{ds}: " + ("SLO met" if day_met(checks) else f"SLO not met: {why_not(checks)}"))
            return 0
        if args.gate_action == "promote":
            out = gate_store.promote(
                spark, spec, force=args.force, reason=args.reason, by=args.by, pause_batch=_set_batch_dag_paused
            )
        elif args.gate_action == "rollback":
            out = gate_store.rollback(
                spark, spec, to=args.to, reason=args.reason, by=args.by, pause_batch=_set_batch_dag_paused
            )
        elif args.gate_action == "view":
            name = "canary" if args.canary else "public"
            df = gate_store.view(spark, spec, name)
            served = gate_store.status(spark, spec).serving[name] or {}
            out = {"view": spec.pipeline + ("_canary" if args.canary else ""), **served, "rows": df.count()}
        else:
            out = gate_store.status(spark, spec).as_dict()
            if not args.json:
                print(_gate_summary(out))
                return 0
    except GateRefused as exc:
        raise UserError(str(exc), EXIT_USAGE) from None
    if args.json:
        _print_json(out)
    elif args.gate_action == "view":
        print(f"{out['view']} reads {out['variant']} ({out['table']}): {out['rows']} rows")
    else:
        print(f"{out['action']}: {out['from']} -> {out['to']}; public view reads {out['serving']['public']['variant']}")
    return 0


def _gate_summary(st: dict[str, Any]) -> str:
    """`joinshift gate status` for people: stage, days met, why not, the latest days."""
    serve = st["serving"]
    lines = [
        f"{st['pipeline']}: stage {st['stage']} ({' -> '.join(st['stages'])})",
        f"  public view reads {serve['public']['variant']}"
        + (f", canary view reads {serve['canary']['variant']}" if serve.get("canary") else ", no canary view")
        + (f"; {st['batch_dag']} paused" if st["batch_dag_paused"] else ""),
        f"  days met {len(st['days_met'])}/{st['days_required']}: {st['message']}",
    ]
    for d in st["days"][:7]:
        lines.append(f"  {d['ds']}: " + ("met" if d["met"] else f"not met: {d['why_not']}"))
    return "\n".join(lines)


def cmd_kafka(args: argparse.Namespace) -> int:
    """The embedded broker: ``start``, ``stop`` or ``status`` (the same shape as ``spark-server``)."""
    from jobs.local.kafka_broker import BrokerError, EmbeddedKafka

    return _service_action(EmbeddedKafka(), args, BrokerError, start_timeout=60)


def cmd_spark_server(args: argparse.Namespace) -> int:
    """``start`` prints the URL for ``JOINSHIFT_SPARK_REMOTE``; ``status`` the pid and URL as JSON."""
    from jobs.local.spark_connect import SparkConnectError, SparkConnectServer

    if args.port is not None and not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: use 1-65535, or 0 for a free port", EXIT_USAGE)
    return _service_action(SparkConnectServer(port=args.port), args, SparkConnectError, start_timeout=120)


def cmd_settings(args: argparse.Namespace) -> int:
    """The settings this process resolves (defaults, the settings file, ``JOINSHIFT_*``), each
    with where its value came from; credentials are hidden."""
    from rich.table import Table

    from jobs.settings import resolve_settings, settings_rows

    rows = settings_rows(*resolve_settings())
    if args.json:
        print(json.dumps([{"setting": n, "value": v, "from": o} for n, v, o in rows], indent=2))
        return 0
    t = Table(
        title="joinshift settings", title_justify="left", caption="later wins: default < settings file < JOINSHIFT_*"
    )
    for col in ("setting", "value", "from"):
        t.add_column(col, overflow="fold")
    for name, value, origin in rows:
        t.add_row(name, value or "[dim](empty)[/dim]", origin)
    _console().print(t)
    return 0
