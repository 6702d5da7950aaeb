"""What each ``joinshift`` command does, given its parsed arguments (parsing is :mod:`jobs.cli`'s).

Each ``cmd_<name>(args) -> exit code`` loads the spec, opens what it needs (Spark, Kafka) and
calls the wings below; a :class:`UserError` is something the user can fix, printed as one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

BATCH_CHOICES = ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed")
EXIT_USAGE = 2


class UserError(Exception):
    """Something the user can fix; the message says what. Printed as one line, exit ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _ds_range(args: argparse.Namespace) -> list[date]:
    if args.to and args.to < args.ds:
        raise UserError(f"--to ({args.to}) is before --ds ({args.ds})", EXIT_USAGE)
    end = args.to or args.ds
    return [args.ds + timedelta(days=i) for i in range((end - args.ds).days + 1)]


def _load_spec(path: str) -> Any:
    from jobs.spec import load_spec, spec_path

    return load_spec(spec_path(path))


def _spark(name: str) -> Any:
    from jobs.storage.spark import get_spark

    return get_spark(f"joinshift-{name}")


def _bootstrap() -> str:
    from jobs.storage.kafka import bootstrap_servers

    return bootstrap_servers()


def _console() -> Any:
    from rich.console import Console

    return Console(width=max(140, Console().width))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


# ------------------------------------------------------------------------------- commands


def cmd_kafka(args: argparse.Namespace) -> int:
    from jobs.local.kafka_broker import BrokerError, EmbeddedKafka

    broker = EmbeddedKafka()
    try:
        if args.action == "start":
            print(broker.start(timeout=args.timeout or 60))
        elif args.action == "stop":
            broker.stop(timeout=args.timeout or 30)
        else:
            _print_json(broker.status())
    except BrokerError as e:
        raise UserError(str(e)) from None
    return 0


def cmd_airflow(args: argparse.Namespace) -> int:
    from jobs.local.airflow_env import apply_airflow_env

    env = apply_airflow_env()
    airflow = str(Path(sys.executable).with_name("airflow"))
    os.execve(airflow, [airflow, *args.airflow_args], env)
    return 0  # not reached


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.local.demo import run_demo

    return run_demo(
        spec_file=args.spec,
        workload_file=args.workload,
        slice_minutes=args.slice_minutes,
        keep=args.keep,
        verbose=args.verbose,
    )


def cmd_generate(args: argparse.Namespace) -> int:
    """Generate a workload; publish it to Kafka all at once (no simulated real time)."""
    from jobs.spec import spec_path
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import load_workload
    from jobs.workload.publisher import publish

    spec = _load_spec(args.spec)
    wl = generate(load_workload(spec_path(args.workload)), spec)
    if args.dry_run:
        _print_json(wl.summary())
        return 0
    bootstrap = _bootstrap()
    for stream in (spec.left, spec.right):
        create_topic(bootstrap, stream.topic)
    print(json.dumps(publish(wl.records, bootstrap)))
    return 0


def cmd_land(args: argparse.Namespace) -> int:
    from jobs.steps.landing import land_ds

    spec, spark = _load_spec(args.spec), _spark("land")
    for ds in _ds_range(args):
        print(
            json.dumps(
                {side: asdict(land_ds(spark, spec, side, ds)) for side in args.side or ("left", "right")}, default=str
            )
        )
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    from jobs.steps.batch import run_variant

    spec, spark = _load_spec(args.spec), _spark("batch")
    for ds in _ds_range(args):
        for v in args.variant or BATCH_CHOICES:
            print(json.dumps({"ds": str(ds), "variant": v, "rows": run_variant(spark, spec, v, ds)}))
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    from jobs.steps.stream import run_continuous, run_increment

    spec = _load_spec(args.spec)
    spark, bootstrap = _spark("stream-join"), _bootstrap()
    if args.available_now:
        print(json.dumps(run_increment(spark, spec, bootstrap=bootstrap)))
    else:
        run_continuous(spark, spec, bootstrap=bootstrap, trigger_interval=args.trigger_interval)
    return 0


def cmd_replay_as_live(args: argparse.Namespace) -> int:
    import re
    from datetime import UTC, datetime

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobs.spec.duration import duration_seconds
    from jobs.steps.replay_live import replay_as_live

    try:
        slice_minutes = duration_seconds(args.slice) / 60
    except ValueError as e:
        raise UserError(f"--slice {args.slice!r}: {e}", EXIT_USAGE) from None
    if not 0 < slice_minutes <= 1440:
        raise UserError(f"--slice {args.slice}: use a positive duration up to a day, e.g. 15m, 30m, 1h", EXIT_USAGE)
    if args.to and not args.from_ds:
        raise UserError("--to needs --from (the first arrival day)", EXIT_USAGE)
    if args.from_ds and args.to and args.to < args.from_ds:
        raise UserError(f"--to ({args.to}) is before --from ({args.from_ds})", EXIT_USAGE)
    source = _load_spec(args.spec)
    spec = source
    if args.as_pipeline:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", args.as_pipeline):
            raise UserError(f"--as {args.as_pipeline!r}: use letters, digits, '_', '.' or '-'", EXIT_USAGE)
        spec = source.model_copy(update={"pipeline": args.as_pipeline})
    days = None
    if args.from_ds:
        last = args.to or args.from_ds
        days = [args.from_ds + timedelta(days=i) for i in range((last - args.from_ds).days + 1)]
    spark, bootstrap = _spark("replay-as-live"), _bootstrap()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),  # the bar on stderr, the result (JSON) on stdout
    ) as progress:
        task = progress.add_task("replay-as-live", total=None)

        def on_slice(done: int, total: int, end_ms: int) -> None:
            label = datetime.fromtimestamp(end_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")
            progress.update(task, completed=done, total=total, description=f"stream ⟵ arrivals to {label}")

        try:
            result = replay_as_live(
                spark,
                spec,
                bootstrap=bootstrap,
                days=days,
                source=source,
                slice_minutes=slice_minutes,
                on_slice=on_slice,
            )
        except ValueError as e:
            raise UserError(str(e)) from None
    _print_json(result.as_dict())
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from jobs.accuracy.compare import compare_ds, render_table

    spec, spark = _load_spec(args.spec), _spark("compare")
    from jobs.storage.stream_runs import read_runs

    rows = [m for ds in _ds_range(args) for m in compare_ds(spark, spec, ds)]
    _console().print(render_table(rows, read_runs(spec)))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import pandas as pd

    from jobs.accuracy.sweep import format_candidate, parse_grid, sweep_ds

    candidates = parse_grid(args.grid)
    spec, spark = _load_spec(args.spec), _spark("window-sweep")
    out = sweep_ds(spark, spec, _ds_range(args), candidates, right_days=args.right_days)
    out.insert(3, "window", [format_candidate(a, b) for a, b in zip(out.lower_s, out.upper_s)])
    with pd.option_context("display.max_rows", None, "display.width", 160):
        print(out.to_string(index=False))
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    from jobs.accuracy.recommend import recommend, save

    spec, spark = _load_spec(args.spec), _spark("recommend")
    console = _console()
    with console.status("sweeping candidate windows over the landed days"):
        rec = recommend(
            spark, spec, _ds_range(args), target_share=args.target_share, target_drop_rate=args.target_drop_rate
        )
        path = save(spark, spec, rec)
    if args.json:
        print(path.read_text())
        return 0
    c, d = rec.chosen, rec.deployed
    console.print(
        f"[bold]recommended window {c.label()}[/bold], watermarks left {rec.left_watermark_s}s, "
        f"right {rec.right_watermark_s}s (deployed {d.label()}, left {spec.left.watermark_seconds}s, "
        f"right {spec.right.watermark_seconds}s)"
    )
    console.print(
        f"  predicted match rate {100 * c.predicted_match_rate:.2f}% vs {rec.baseline} "
        f"{100 * rec.baseline_match_rate:.2f}% (deployed window predicted {100 * d.predicted_match_rate:.2f}%)"
    )
    console.print(
        f"  state memory {c.predicted_memory_bytes / 1e6:.1f} MB, left-outer latency "
        f"{c.output_latency_s / 60:.0f} min" + (f", recovery by replay {c.recovery_s:.0f}s" if c.recovery_s else "")
    )
    for r in rec.reasons:
        console.print(f"  - {r}")
    console.print(f"written to {path}")
    return 0


def cmd_attribute(args: argparse.Namespace) -> int:
    from jobs.accuracy.attribution import attribute_misses

    spec, spark = _load_spec(args.spec), _spark("attribute")
    for ds in _ds_range(args):
        _print_json(attribute_misses(spark, spec, ds, baseline=args.baseline))
    return 0


def cmd_quality(args: argparse.Namespace) -> int:
    from jobs.quality.gates import GateFailed, assert_gates, run_gates, write_gate_results
    from jobs.quality.suites import EXPECTATIONS_DIR, KINDS, suites_out_of_sync, write_suites

    spec = _load_spec(args.spec)
    where = args.dir or str(EXPECTATIONS_DIR)
    if args.action == "write-suites":
        for path in write_suites(spec, where):
            print(path)
        return 0
    if args.action == "check-suites":
        drift = suites_out_of_sync(spec, where)
        if drift:
            raise UserError(
                f"out of sync with {args.spec}: {', '.join(drift)}; run "
                f"`joinshift quality write-suites --spec {args.spec}`"
            )
        print("suites in sync")
        return 0
    if args.ds is None:
        raise UserError("`quality run` needs --ds YYYY-MM-DD (the day whose gates to run)", EXIT_USAGE)
    unknown = set(args.kind or ()) - set(KINDS)
    if unknown:
        raise UserError(f"--kind {', '.join(sorted(unknown))}: not a gate; gates: {', '.join(KINDS)}", EXIT_USAGE)
    spark = _spark("quality")
    results = run_gates(spark, spec, args.ds, kinds=args.kind or KINDS, suites_dir=where)
    write_gate_results(spark, spec, args.ds, results)
    for r in results:
        print(r.summary)
    try:
        assert_gates(results)
    except GateFailed:
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    if args.example:  # the report's look on made-up numbers: no Spark, no tables
        from jobs.report import example_data, publish_report

        files = publish_report(example_data(ds=str(args.ds or date(2026, 11, 20))), Path(args.out))
        print(files.html)
        return 0
    if args.ds is None:
        raise UserError("--ds YYYY-MM-DD is required (or --example)", EXIT_USAGE)
    from jobs.report.assemble import publish

    spec, spark = _load_spec(args.spec), _spark("report")
    days = _ds_range(args)
    with Progress() as progress:
        t = progress.add_task("accuracy reports", total=len(days))
        for ds in days:
            files = publish(spark, spec, ds, learn_days=[ds])
            progress.console.print(f"{ds}: {files.html}")
            progress.advance(t)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from jobs.spec import load_spec
    from jobs.spec.plan import plan

    result = plan(load_spec(args.deployed), load_spec(args.proposed))
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.render())
    return result.exit_code


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Exit 1 when the checkpoint is broken (validate, inspect) or cannot be read."""
    import logging

    from jobs.operate.checkpoint import backup_checkpoint, expected_query_id, inspect_checkpoint, render_inspection
    from jobs.operate.checkpoint_validate import validate_checkpoint
    from jobs.storage.checkpoints import local_path
    from jobs.storage.tables import Tables

    spec = _load_spec(args.spec)
    tables = Tables.of(spec)
    path = args.checkpoint or tables.checkpoint(args.query)
    if args.action == "backup":
        target = backup_checkpoint(path)
        print(json.dumps({"backup": str(target)}) if args.json else f"backed up {path} to {target}")
        return 0
    if args.action == "validate":
        expected = None if args.checkpoint else expected_query_id(tables.progress_log(args.query))
        health = validate_checkpoint(path, spec=spec, expected_query_id=expected, spec_arg=args.spec)
        print(json.dumps(health.to_dict(), indent=2) if args.json else health.render())
        return 0 if health.ok else 1
    try:
        bootstrap: str | None = _bootstrap()
    except Exception as e:  # no broker: inspect the checkpoint anyway, lag "unknown"
        logging.getLogger("joinshift.checkpoint").warning("Kafka lag unknown: %s", e)
        bootstrap = None
    spark = _spark("checkpoint-inspect") if local_path(path).is_dir() else None
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
        _print_json(asdict(replay(_spark("replay"), spec, cutover, bootstrap=_bootstrap())))
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
