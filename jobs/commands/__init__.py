"""What each ``joinshift`` command does, given its parsed arguments (parsing is :mod:`jobs.cli`'s).

The operations wing's commands (checkpoint, replay, supervise, health, runbook, gate) are in
:mod:`jobs.commands.operate`; what every body shares is in :mod:`jobs.commands.common`.

Each ``cmd_<name>(args) -> exit code`` loads the spec, opens what it needs (Spark, Kafka) and
calls the wings below; a :class:`UserError` is something the user can fix, printed as one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

from jobs.commands.common import (
    BATCH_CHOICES,
    EXIT_USAGE,
    UserError,
    _bootstrap,
    _console,
    _ds_range,
    _load_spec,
    _print_json,
    _spark,
    _stop_on_signals,
    day_range,
)
from jobs.commands.operate import (
    cmd_checkpoint,
    cmd_gate,
    cmd_health,
    cmd_kafka,
    cmd_replay,
    cmd_runbook,
    cmd_settings,
    cmd_spark_server,
    cmd_supervise,
)
from jobs.storage import fs

__all__ = [
    "BATCH_CHOICES",
    "EXIT_USAGE",
    "UserError",
    "cmd_checkpoint",
    "cmd_gate",
    "cmd_health",
    "cmd_kafka",
    "cmd_replay",
    "cmd_runbook",
    "cmd_settings",
    "cmd_spark_server",
    "cmd_supervise",
]


# ------------------------------------------------------------------------------- commands


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


def cmd_import(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from jobs.steps.importing import file_format, import_files

    files = {side: path for side, path in (("left", args.left), ("right", args.right)) if path}
    if not files:
        raise UserError("name at least one file: --left FILE and/or --right FILE", EXIT_USAGE)
    if args.partitions < 1:
        raise UserError("--partitions must be at least 1", EXIT_USAGE)
    for path in files.values():
        file_format(path)  # a file that is not there or not readable: said before Kafka and Spark
    spec, bootstrap, spark = _load_spec(args.spec), _bootstrap(), _spark("import")  # Kafka answers first
    with Progress(transient=True) as bar:
        task = bar.add_task("publishing in arrival order", total=None)
        sent = import_files(
            spark,
            spec,
            files,
            bootstrap,
            arrival=args.arrival,
            partitions=args.partitions,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    print(json.dumps(sent))
    return 0


def cmd_land(args: argparse.Namespace) -> int:
    from jobs.steps.landing import land_ds

    days, sides = _ds_range(args), args.side or ("left", "right")  # the arguments before Kafka and Spark
    spec, bootstrap, spark = _load_spec(args.spec), _bootstrap(), _spark("land")
    for ds in days:
        print(
            json.dumps(
                {side: asdict(land_ds(spark, spec, side, ds, bootstrap=bootstrap)) for side in sides}, default=str
            )
        )
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    """Every (ds, variant) that can be computed is; one whose right days have not landed is
    printed as incomplete with the days it waits for (the day-edge rule) and the run goes on."""
    from jobs.steps.batch import PartitionsNotLanded, run_variant

    days, spec, spark = _ds_range(args), _load_spec(args.spec), _spark("batch")  # arguments before Spark
    for ds in days:
        for v in args.variant or BATCH_CHOICES:
            row: dict[str, Any] = {"ds": str(ds), "variant": v}
            try:
                row.update(status="done", rows=run_variant(spark, spec, v, ds))
            except PartitionsNotLanded as e:
                row.update(status="incomplete", waiting_for=[str(d) for d in e.missing])
                print(f"joinshift batch: {e}", file=sys.stderr)
            print(json.dumps(row))
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    from jobs.steps.stream import run_continuous, run_increment

    spec = _load_spec(args.spec)
    # only the continuous stream's driver lives on (G1); an increment runs to its end
    bootstrap, spark = _bootstrap(), _spark("stream-join", classic=True, throughput=args.available_now)
    if args.available_now:
        print(json.dumps(run_increment(spark, spec, bootstrap=bootstrap)))
    else:
        stop = _stop_on_signals("stream", "stopping between micro-batches")
        if run_continuous(spark, spec, bootstrap=bootstrap, trigger_interval=args.trigger_interval, stop=stop):
            spark.stop()  # Spark's own clean-up (its local dirs, the state stores) before the exit
            print("joinshift stream: stopped", file=sys.stderr)
    return 0


def _slice_minutes(flag: str, text: str) -> float:
    """A replay slice (record time per micro-batch) given as a duration, in minutes."""
    from jobs.spec.duration import duration_seconds

    try:
        minutes = duration_seconds(text) / 60
    except ValueError as e:
        raise UserError(f"{flag} {text!r}: {e}", EXIT_USAGE) from None
    from jobs.steps.replay_live import check_slice

    try:
        return check_slice(minutes)
    except ValueError as exc:
        raise UserError(f"{flag} {text}: {exc}", EXIT_USAGE) from None


def cmd_replay_as_live(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobs.operate.gate_store import serves_stream
    from jobs.spec.model import pipeline_name
    from jobs.steps.replay_live import replay_as_live

    slice_minutes = _slice_minutes("--slice", args.slice)
    days = day_range(args.from_ds, args.to)
    source = _load_spec(args.spec)
    spec = source
    if args.as_pipeline:
        try:  # the spec's own rule for a pipeline's name (model_copy checks nothing)
            spec = source.model_copy(update={"pipeline": pipeline_name(args.as_pipeline)})
        except ValueError as exc:
            raise UserError(f"--as {args.as_pipeline!r}: {exc}", EXIT_USAGE) from None
    bootstrap = _bootstrap()  # before the trial clears the pipeline's checkpoint and output
    spark = _spark("replay-as-live", classic=True)
    if served := serves_stream(spark, spec):
        raise UserError(served, EXIT_USAGE)
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
                days=days or None,
                source=source,
                slice_minutes=slice_minutes,
                on_slice=on_slice,
            )
        except ValueError as e:
            raise UserError(str(e)) from None
    _print_json(result.as_dict())
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from jobs.accuracy.compare import compare_ds, read_hourly, render_hourly_table, render_table
    from jobs.steps.batch import waiting_variants
    from jobs.storage.stream_runs import read_runs

    days, spec, spark = _ds_range(args), _load_spec(args.spec), _spark("compare")
    rows = [m for ds in days for m in compare_ds(spark, spec, ds)]
    _console().print(render_table(rows, spec.accuracy.baseline, read_runs(spec)))
    for ds in days:
        for v, wait in waiting_variants(spark, spec, ds).items():
            print(f"{v} for ds {ds}: incomplete (—), waits for right-stream ds {', '.join(map(str, wait))}")
    if args.hourly:
        _console().print(render_hourly_table(read_hourly(spark, spec, days)))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import pandas as pd

    from jobs.accuracy.grid import format_candidate, parse_grid
    from jobs.accuracy.sweep import sweep_ds

    candidates = parse_grid(args.grid)
    days, spec, spark = _ds_range(args), _load_spec(args.spec), _spark("window-sweep")
    out = sweep_ds(spark, spec, days, candidates, right_days=args.right_days)
    out.insert(3, "window", [format_candidate(a, b) for a, b in zip(out.lower_s, out.upper_s)])
    with pd.option_context("display.max_rows", None, "display.width", 160):
        print(out.to_string(index=False))
    return 0


def _with_budgets(spec: Any, args: argparse.Namespace) -> Any:
    """The spec with ``--output-latency`` / ``--state-memory`` in place of its budgets."""
    from jobs.spec import parse_spec

    data = spec.model_dump(mode="json", by_alias=True)
    for name in ("output_latency", "state_memory"):
        if getattr(args, name, None):
            data.setdefault("budgets", {})[name] = getattr(args, name)
    return parse_spec(data, "--output-latency/--state-memory")  # a SpecError names the bad budget


def _frontier_table(rec: Any) -> Any:
    """The Pareto frontier (and the deployed and chosen candidates) as a rich table."""
    from rich.table import Table

    from jobs.spec import fmt_duration, format_bytes

    # the paced engine has no watermark delays: its first answers instead (its match rate is the final one)
    paced = rec.chosen.paced
    t = Table(title=f"Pareto frontier: match rate vs p99 latency ({rec.cadence})", title_justify="left")
    for col in (
        "",
        "match rate",
        f"vs {rec.baseline}",
        "vs reference",
        "p99 latency",
        "memory",
        "window",
        "first answers" if paced else "watermarks",
    ):
        t.add_column(col, justify="left" if col in ("", "window", "watermarks") else "right")
    rows = {c.key(): c for c in rec.frontier}
    rows.setdefault(rec.deployed.key(), rec.deployed)
    rows.setdefault(rec.chosen.key(), rec.chosen)

    def pp(rate: float, other: float | None) -> str:
        return "—" if other is None else f"{100 * (rate - other):+.2f}"

    for c in sorted(rows.values(), key=lambda c: (c.p99_latency_s, -c.match_rate)):
        mark = " ".join(m for m, k in (("CHOSEN", rec.chosen.key()), ("deployed", rec.deployed.key())) if c.key() == k)
        style = "bold green" if c.key() == rec.chosen.key() else ("yellow" if c.key() == rec.deployed.key() else None)
        t.add_row(
            mark,
            f"{100 * c.match_rate:.2f}%",
            pp(c.match_rate, rec.baseline_match_rate),
            pp(c.match_rate, rec.reference_match_rate),
            fmt_duration(c.p99_latency_s),
            format_bytes(c.memory_bytes),
            c.label(),
            f"{100 * (c.first_answer_rate or 0):.2f}%" if paced else c.watermarks(),
            style=style,
        )
    return t


def cmd_recommend(args: argparse.Namespace) -> int:
    from jobs.accuracy.recommend import default_cadence, recommend, save
    from jobs.accuracy.verify import VERIFY_SLICE_MINUTES

    spec = _with_budgets(_load_spec(args.spec), args)
    # the choice is made for the cadence the stream will run at (live, unless --slice-minutes);
    # --verify then predicts it for its replay-as-live trial and holds the trial to that
    slice_minutes = args.slice_minutes
    cadence = default_cadence(spec, slice_minutes)
    trial_minutes = (
        _slice_minutes("--trial-slice", args.trial_slice) if args.trial_slice else slice_minutes or VERIFY_SLICE_MINUTES
    )
    days, spark = _ds_range(args), _spark("recommend", classic=args.verify)  # --verify streams
    console = _console()
    what = f"measuring candidates over the landed days ({cadence.label()})"
    with console.status(what) as status:

        def on_window(done: int, total: int) -> None:  # a paced spec's windows take seconds each
            status.update(f"{what}: {done}/{total} windows run by the paced engine's rules")

        rec = recommend(spark, spec, days, cadence=cadence, on_window=on_window)
        path = save(spark, spec, rec)
    if args.json:
        if not args.verify:
            print(fs.read_text(path))
            return 0
        res = _run_verify(spark, spec, rec, days, trial_minutes, console)
        print(json.dumps({"recommendation": json.loads(fs.read_text(path)), "verify": res.to_dict()}, default=str))
        return 0 if res.within() else 1
    console.print(_frontier_table(rec))
    c = rec.chosen
    console.print(
        f"[bold]chosen: window {c.label()}, watermarks {c.watermarks()}[/bold] "
        f"(deployed {rec.deployed.label()}, watermarks {rec.deployed.watermarks()})"
    )
    for r in rec.explanation:
        console.print(f"  - {r}")
    for r in rec.relax:
        console.print(f"  [red]relax:[/red] {r}")
    console.print(f"written to {path}")
    if args.verify:
        return _verify(spark, spec, rec, days, trial_minutes, console)
    return 0


def _run_verify(spark: Any, spec: Any, rec: Any, days: list[date], slice_minutes: float, console: Any) -> Any:
    from jobs.accuracy.recommend import default_cadence
    from jobs.accuracy.verify import predict_trial, verify

    trial = default_cadence(spec, slice_minutes).label()
    if rec.cadence != trial or rec.inputs.get("sample_share", 1.0) < 1:  # the trial's prediction: every left event
        with console.status(f"predicting the chosen settings for {trial}"):
            rec = predict_trial(spark, spec, days, rec.chosen, slice_minutes)
    with console.status(f"trial: replaying {len(days)} ds as live with the chosen settings"):
        return verify(spark, spec, rec, days, bootstrap=_bootstrap(), slice_minutes=slice_minutes)


def _verify(spark: Any, spec: Any, rec: Any, days: list[date], slice_minutes: float, console: Any) -> int:
    from rich.table import Table

    from jobs.accuracy.verify import PROMISE_PP
    from jobs.spec import fmt_duration

    res = _run_verify(spark, spec, rec, days, slice_minutes, console)
    t = Table(title=f"predicted vs measured ({res.pipeline}, {res.cadence})", title_justify="left")
    for col in ("ds", "left events", "predicted", "measured", "measured − predicted"):
        t.add_column(col, justify="left" if col == "ds" else "right")
    for d in res.days:
        t.add_row(
            d.ds, f"{d.left_events:,}", f"{100 * d.predicted:.2f}%", f"{100 * d.measured:.2f}%", f"{d.diff_pp:+.3f} pp"
        )
    t.add_row(
        "all", "", f"{100 * res.predicted:.2f}%", f"{100 * res.measured:.2f}%", f"{res.diff_pp:+.3f} pp", style="bold"
    )
    console.print(t)
    console.print(
        f"p99 latency predicted {fmt_duration(res.predicted_p99_latency_s)}, measured "
        f"{fmt_duration(res.measured_p99_latency_s)} over {res.output_rows:,} output rows"
    )
    for line in res.state_lines():
        console.print(line)
    for note in res.notes:
        console.print(f"  - {note}")
    if res.cadence != rec.cadence:
        c = rec.chosen
        console.print(
            f"  - the trial's rate and latency are its cadence's; the same model predicts the live stream "
            f"({rec.cadence}) at {100 * c.match_rate:.2f}% with p99 latency {fmt_duration(c.p99_latency_s)}"
        )
    ok = res.within()
    verdict = "within" if ok else "NOT within"
    console.print(f"[{'green' if ok else 'red'}]match rate {verdict} {PROMISE_PP} pp of the prediction[/]")
    return 0 if ok else 1


def cmd_attribute(args: argparse.Namespace) -> int:
    from jobs.accuracy.attribution import attribute_misses, check_baseline
    from jobs.report.attribution_view import render_account

    spec = _load_spec(args.spec)
    try:
        baseline = check_baseline(args.baseline or spec.accuracy.baseline)
    except ValueError as e:
        raise UserError(str(e), EXIT_USAGE) from None
    days, spark = _ds_range(args), _spark("attribute")
    for ds in days:
        try:
            att = attribute_misses(spark, spec, ds, baseline=baseline)
        except ValueError as e:
            raise UserError(str(e)) from None
        if args.json:
            _print_json(att)
        else:
            _console().print(render_account(att))
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
        if not Path(where).is_dir():
            raise UserError(f"no suites folder {where}: name it with --dir, or write the suites there first")
        if drift := suites_out_of_sync(spec, where):
            again = f"--spec {args.spec}" + (f" --dir {args.dir}" if args.dir else "")
            raise UserError(
                f"out of sync with {args.spec}: {', '.join(drift)}; run `joinshift quality write-suites {again}`"
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

    days, spec, spark = _ds_range(args), _load_spec(args.spec), _spark("report")
    with Progress() as progress:
        t = progress.add_task("accuracy reports", total=len(days))
        for ds in days:
            files = publish(spark, spec, ds, learn_days=[ds])
            progress.console.print(f"{ds}: {files.html}")
            progress.advance(t)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from jobs.spec.plan import plan

    result = plan(_load_spec(args.deployed), _load_spec(args.proposed))
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.render())
    return result.exit_code
