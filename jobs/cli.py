"""``joinshift``: the command line of the product, and its only argument parser.

Every command takes the join spec (``--spec``, default :data:`jobs.spec.DEFAULT_SPEC`) and reads
its environment from ``JOINSHIFT_*`` variables or ``joinshift.yaml`` (see ``jobs/settings.py``).
A user error (bad spec, argument or missing input) is one line on stderr and a non-zero exit.
Logs go to ``<log_dir>/joinshift.log``; ``-v`` shows them on the console too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from jobs.settings import settings
from jobs.spec import DEFAULT_SPEC, DEFAULT_WORKLOAD

BATCH_CHOICES = ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed")
EXIT_USAGE = 2

log = logging.getLogger("joinshift")


class UserError(Exception):
    """Something the user can fix; the message says what. Printed as one line, exit ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date; use YYYY-MM-DD") from None


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return n


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
    from jobs.local import kafka_broker

    return kafka_broker.main([args.action])


def cmd_airflow(args: argparse.Namespace) -> int:
    from jobs.local.airflow_env import apply_airflow_env

    env = apply_airflow_env()
    airflow = str(Path(sys.executable).with_name("airflow"))
    os.execve(airflow, [airflow, *args.airflow_args], env)
    return 0  # not reached


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.local.demo import run_demo

    return run_demo(spec_file=args.spec, workload_file=args.workload, slice_minutes=args.slice_minutes,
                    keep=args.keep, verbose=args.verbose)


def cmd_generate(args: argparse.Namespace) -> int:
    """Publish a workload to Kafka all at once (no simulated real time)."""
    from jobs.spec import spec_path
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import load_workload
    from jobs.workload.publisher import publish

    spec = _load_spec(args.spec)
    wl = generate(load_workload(spec_path(args.workload)), spec)
    bootstrap = _bootstrap()
    for stream in (spec.left, spec.right):
        create_topic(bootstrap, stream.topic)
    print(json.dumps(publish(wl.records, bootstrap)))
    return 0


def cmd_land(args: argparse.Namespace) -> int:
    from jobs.steps.landing import land_ds

    spec, spark = _load_spec(args.spec), _spark("land")
    for ds in _ds_range(args):
        print(json.dumps({side: asdict(land_ds(spark, spec, side, ds)) for side in args.side or ("left", "right")},
                         default=str))
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


def cmd_compare(args: argparse.Namespace) -> int:
    from jobs.accuracy.compare import compare_ds, render_table

    spec, spark = _load_spec(args.spec), _spark("compare")
    rows = [m for ds in _ds_range(args) for m in compare_ds(spark, spec, ds)]
    _console().print(render_table(rows))
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
        rec = recommend(spark, spec, _ds_range(args), target_share=args.target_share,
                        target_drop_rate=args.target_drop_rate)
        path = save(spark, spec, rec)
    if args.json:
        print(path.read_text())
        return 0
    c, d = rec.chosen, rec.deployed
    console.print(f"[bold]recommended window {c.label()}[/bold], watermarks left {rec.left_watermark_s}s, "
                  f"right {rec.right_watermark_s}s (deployed {d.label()}, left {spec.left.watermark_seconds}s, "
                  f"right {spec.right.watermark_seconds}s)")
    console.print(f"  predicted match rate {100 * c.predicted_match_rate:.2f}% vs {rec.baseline} "
                  f"{100 * rec.baseline_match_rate:.2f}% (deployed window predicted {100 * d.predicted_match_rate:.2f}%)")
    console.print(f"  state memory {c.predicted_memory_bytes / 1e6:.1f} MB, left-outer latency "
                  f"{c.output_latency_s / 60:.0f} min" + (f", recovery by replay {c.recovery_s:.0f}s" if c.recovery_s else ""))
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
    from jobs.quality import gates

    argv = [args.action, "--spec", args.spec] + ([f"--ds={args.ds}"] if getattr(args, "ds", None) else [])
    return gates.main(argv)


def cmd_report(args: argparse.Namespace) -> int:
    from rich.progress import Progress

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
    from jobs.operate import checkpoint

    return checkpoint.main([args.action, "--spec", args.spec] + (["--json"] if args.json else []))


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
    report = supervise(spec, spec_path=path, checks=args.checks, interval_s=args.interval,
                       stall_after_s=args.stall_after, trigger_interval=args.trigger_interval)
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


# ------------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    try:
        from rich_argparse import RawDescriptionRichHelpFormatter as fmt
    except ImportError:  # pragma: no cover
        fmt = argparse.RawDescriptionHelpFormatter  # type: ignore[assignment,misc]
    p = argparse.ArgumentParser(
        prog="joinshift", formatter_class=fmt,
        description="Move a daily batch join onto a streaming join, with numbers: run both side by "
                    "side on Kafka, Spark and Delta, compare match rates and window-boundary deltas.",
        epilog="Quick start: `joinshift demo` (starts a local Kafka broker, generates two days of "
               "search sessions, runs batch and streaming joins through Airflow, prints the comparison).",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="logs (and Spark/Airflow warnings) on the console")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, formatter_class=fmt)
        sp.set_defaults(func=func)
        return sp

    def with_spec(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--spec", default=DEFAULT_SPEC, help=f"join spec YAML (default: {DEFAULT_SPEC})")
        return sp

    def with_ds(sp: argparse.ArgumentParser, required: bool = True) -> argparse.ArgumentParser:
        sp.add_argument("--ds", type=_date, required=required, help="first ds, YYYY-MM-DD")
        sp.add_argument("--to", type=_date, help="last ds of a range (inclusive)")
        return sp

    k = cmd("kafka", cmd_kafka, "start, stop or inspect the embedded Kafka broker (KRaft, loopback)")
    k.add_argument("action", choices=("start", "stop", "status"))

    a = cmd("airflow", cmd_airflow, "run the `airflow` CLI against this project's local Airflow "
                                    "(e.g. `joinshift airflow standalone`)")
    a.add_argument("airflow_args", nargs=argparse.REMAINDER, help="arguments for airflow")

    d = with_spec(cmd("demo", cmd_demo, "the main job: two generated days through batch and streaming "
                                        "joins side by side, then the comparison"))
    d.add_argument("--workload", default=DEFAULT_WORKLOAD, help=f"workload YAML (default: {DEFAULT_WORKLOAD})")
    d.add_argument("--slice-minutes", type=_positive_int, default=60,
                   help="simulated minutes of arrivals per streaming micro-batch (default: 60)")
    d.add_argument("--keep", action="store_true",
                   help="keep the previous demo's topics and tables instead of starting clean")

    g = with_spec(cmd("generate", cmd_generate, "generate a workload and publish it to Kafka at once"))
    g.add_argument("--workload", default=DEFAULT_WORKLOAD, help="workload YAML")

    ld = with_ds(with_spec(cmd("land", cmd_land, "land both topics' ds into the daily Delta tables")))
    ld.add_argument("--side", choices=("left", "right"), action="append", help="one side only (default: both)")
    b = with_ds(with_spec(cmd("batch", cmd_batch, "run the batch baselines for a ds (or range)")))
    b.add_argument("--variant", action="append", choices=BATCH_CHOICES, help="repeatable; default: all three")
    s = with_spec(cmd("stream", cmd_stream, "run the streaming join (continuous, or one increment)"))
    s.add_argument("--available-now", action="store_true", help="process what is available, then stop")
    s.add_argument("--trigger-interval", help="continuous mode micro-batch interval, e.g. 30s (default: spec)")
    with_ds(with_spec(cmd("compare", cmd_compare, "match rates and boundary deltas per ds")))

    sw = with_ds(with_spec(cmd("sweep", cmd_sweep, "match rate of every candidate window in one pass over the "
                                                   "landed days")))
    sw.add_argument("--grid", default="lower=-6h..0/30m,upper=0..6h/30m",
                    help='candidate windows, e.g. "lower=-6h..0h/30m,upper=0..6h/30m" (default)')
    sw.add_argument("--right-days", choices=("same", "neighbours"), default="same",
                    help="same: right ds = left ds (batch_1d_windowed); neighbours: also ds-1/ds+1")
    r = with_ds(with_spec(cmd("recommend", cmd_recommend,
                              "recommend a window and watermark delays from the landed days (one-pass sweep)")))
    r.add_argument("--target-share", type=float, default=0.995,
                   help="reach this share of the baseline's match rate (default 0.995)")
    r.add_argument("--target-drop-rate", type=float, default=0.001,
                   help="watermark delays drop at most this share of each stream (default 0.001)")
    r.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    at = with_ds(with_spec(cmd("attribute", cmd_attribute,
                               "why the stream missed what the batch matched, per cause and hour")))
    at.add_argument("--baseline", choices=BATCH_CHOICES, help="default: the spec's accuracy.baseline")
    qa = with_spec(cmd("quality", cmd_quality, "data-quality suites from the spec, and the gates for a ds"))
    qa.add_argument("action", choices=("write-suites", "check-suites", "run"))
    qa.add_argument("--ds", help="the ds the gates check (for `run`), YYYY-MM-DD")
    with_ds(with_spec(cmd("report", cmd_report, "build the daily accuracy report (HTML + plots + JSON)")))

    pl = cmd("plan", cmd_plan, "compare a deployed spec with a new one: reuse the checkpoint (exit 0), "
                               "or replay (exit 3)?")
    pl.add_argument("--deployed", required=True, help="the spec the running job uses")
    pl.add_argument("--proposed", required=True, help="the spec you want to deploy")
    pl.add_argument("--json", action="store_true")
    ck = with_spec(cmd("checkpoint", cmd_checkpoint, "inspect, validate or back up the streaming checkpoint"))
    ck.add_argument("action", choices=("inspect", "validate", "backup"))
    ck.add_argument("--json", action="store_true")
    rp = with_spec(cmd("replay", cmd_replay, "rebuild the window by replaying Kafka into a fresh checkpoint"))
    rp.add_argument("--cutover", required=True, help="ISO-8601 instant from which the new run owns the output")
    rp.add_argument("--dry-run", action="store_true", help="check Kafka retention and print the plan only")
    sv = with_spec(cmd("supervise", cmd_supervise, "run the continuous join as its own process; restart it on "
                                                   "exit or stall"))
    sv.add_argument("--checks", type=_positive_int, default=54, help="health checks before returning (default 54)")
    sv.add_argument("--interval", type=float, default=10, help="seconds between checks (default 10)")
    sv.add_argument("--stall-after", type=float, default=120, help="seconds without a micro-batch while records "
                                                                   "wait before a restart (default 120)")
    sv.add_argument("--trigger-interval", help="the stream's micro-batch interval, e.g. 30s (default: spec)")
    sv.add_argument("--stop", action="store_true", help="stop the supervised process and exit")
    rb = with_spec(cmd("runbook", cmd_runbook, "print a runbook filled with this pipeline's values"))
    rb.add_argument("name", help="restart_after_crash, change_the_window, recover_broken_checkpoint, "
                                 "replay_after_outage, cut_over_and_roll_back")
    rb.add_argument("--commands", action="store_true", help="print only the commands to run, in order")
    return p


def _configure_logging(verbose: bool) -> None:
    """Everything to ``<log_dir>/joinshift.log``; the console gets it only with ``-v``."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        log_dir = Path(settings().log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_dir / "joinshift.log")
        file_handler.setFormatter(fmt)
        root.addHandler(file_handler)
    except OSError:
        pass
    console = logging.StreamHandler()
    console.setFormatter(fmt)
    console.setLevel(logging.DEBUG if verbose else logging.ERROR)
    root.addHandler(console)
    if verbose:
        os.environ.setdefault("JOINSHIFT_SPARK_CONSOLE_LEVEL", "warn")  # Spark's WARN lines too
    else:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # a down broker's refusals are expected


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix: printed as one line, never a traceback."""
    from jobs.accuracy.sweep import GridError
    from jobs.spec import SpecError
    from jobs.storage.checkpoints import CheckpointError
    from jobs.storage.kafka import KafkaUnavailable, RetentionGap

    return (SpecError, KafkaUnavailable, RetentionGap, CheckpointError, GridError)


class CommandFailed(SystemExit):
    """How a command ends on a user error: the message was printed to stderr; the process exits
    with ``code``; ``str()`` is the message (what callers in Python and tests see)."""

    def __init__(self, message: str, code: int):
        super().__init__(code)
        self.message = message

    def __str__(self) -> str:
        return self.message


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        message, code = str(exc), exc.code
    except _user_errors() as exc:
        message = str(exc) or type(exc).__name__
        code = EXIT_USAGE if type(exc).__name__ in ("SpecError", "GridError") else 1
    # a spec error names every bad field, one per line; anything else is one line
    text = f"joinshift {args.command}: {message}"
    print(text, file=sys.stderr)
    raise CommandFailed(text, code)


if __name__ == "__main__":
    raise SystemExit(main())
