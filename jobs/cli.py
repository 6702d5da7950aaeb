"""``joinshift``: the command line of the product.

Every command takes the join spec (``--spec``, default: the demo's) and reads its environment
from ``JOINSHIFT_*`` variables or ``joinshift.yaml`` (see ``jobs/settings.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from datetime import date, timedelta
from pathlib import Path

from jobs.settings import PROJECT_ROOT

DEFAULT_SPEC = "include/specs/search_sessions.yaml"
DEFAULT_WORKLOAD = "include/workloads/search_sessions.yaml"

log = logging.getLogger("joinshift")


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


def _ds_range(args) -> list[date]:
    if args.to and args.to < args.ds:
        raise SystemExit(f"joinshift: error: --to ({args.to}) is before --ds ({args.ds})")
    end = args.to or args.ds
    return [args.ds + timedelta(days=i) for i in range((end - args.ds).days + 1)]


def _load_spec(path: str):
    from jobs.spec import spec_path
    from jobs.spec import SpecError, load_spec

    try:
        return load_spec(spec_path(path))
    except SpecError as exc:
        raise SystemExit(f"joinshift: {exc}") from None


# ------------------------------------------------------------------------------- commands

def cmd_kafka(args) -> int:
    from jobs.local import kafka_broker

    return kafka_broker.main([args.action])


def cmd_airflow(args) -> int:
    from jobs.local.airflow_env import apply_airflow_env

    env = apply_airflow_env()
    airflow = str(Path(sys.executable).with_name("airflow"))
    os.execve(airflow, [airflow, *args.airflow_args], env)
    return 0  # not reached


def cmd_land(args) -> int:
    from jobs.steps.landing import land_day
    from jobs.storage.spark import get_spark

    spec, spark = _load_spec(args.spec), get_spark("joinshift-land")
    for ds in _ds_range(args):
        print(json.dumps(land_day(spark, spec, ds), default=str))
    return 0


def cmd_batch(args) -> int:
    from jobs.steps.batch import run_variant
    from jobs.storage.spark import get_spark
    from jobs.join.variants import BATCH_VARIANTS

    spec, spark = _load_spec(args.spec), get_spark("joinshift-batch")
    for ds in _ds_range(args):
        for v in args.variant or BATCH_VARIANTS:
            print(json.dumps({"ds": str(ds), "variant": v, "rows": run_variant(spark, spec, v, ds)}))
    return 0


def cmd_stream(args) -> int:
    from jobs.steps import stream as stream_join

    argv = ["--spec", str(args.spec)] + (["--available-now"] if args.available_now else [])
    if args.trigger_interval:
        argv += ["--trigger-interval", args.trigger_interval]
    return stream_join.main(argv)


def cmd_compare(args) -> int:
    from rich.console import Console

    from jobs.accuracy.compare import compare_ds, render_table
    from jobs.storage.spark import get_spark

    spec, spark = _load_spec(args.spec), get_spark("joinshift-compare")
    rows = [m for ds in _ds_range(args) for m in compare_ds(spark, spec, ds)]
    Console(width=max(140, Console().width)).print(render_table(rows))
    return 0


def cmd_generate(args) -> int:
    """Publish a workload to Kafka all at once (no simulated real time)."""
    from jobs.storage.kafka import bootstrap_servers, create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import load_workload
    from jobs.workload.publisher import publish

    spec = _load_spec(args.spec)
    wl = generate(load_workload(args.workload), spec)
    bootstrap = bootstrap_servers()
    for stream in (spec.left, spec.right):
        create_topic(bootstrap, stream.topic)
    print(json.dumps(publish(wl.records, bootstrap)))
    return 0


def cmd_recommend(args) -> int:
    from rich.console import Console

    from jobs.accuracy.recommend import recommend, save
    from jobs.storage.spark import get_spark

    spec, spark = _load_spec(args.spec), get_spark("joinshift-recommend")
    console = Console(width=max(140, Console().width))
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
    console.print(f"  state memory {c.predicted_memory_bytes / 1e6:.1f} MB, left-outer latency {c.output_latency_s / 60:.0f} min"
                  + (f", recovery by replay {c.recovery_s:.0f}s" if c.recovery_s else ""))
    for r in rec.reasons:
        console.print(f"  - {r}")
    console.print(f"written to {path}")
    return 0


def cmd_attribute(args) -> int:
    from jobs.accuracy.attribution import attribute_misses
    from jobs.storage.spark import get_spark

    spec, spark = _load_spec(args.spec), get_spark("joinshift-attribute")
    for ds in _ds_range(args):
        print(json.dumps(attribute_misses(spark, spec, ds, baseline=args.baseline), indent=2))
    return 0


def cmd_report(args) -> int:
    from rich.progress import Progress

    from jobs.report.assemble import publish
    from jobs.storage.spark import get_spark

    spec, spark = _load_spec(args.spec), get_spark("joinshift-report")
    days = _ds_range(args)
    with Progress() as progress:
        t = progress.add_task("accuracy reports", total=len(days))
        for ds in days:
            files = publish(spark, spec, ds, learn_days=[ds])
            progress.console.print(f"{ds}: {files.html}")
            progress.advance(t)
    return 0


def cmd_plan(args) -> int:
    from jobs.spec import plan

    return plan.main(["--deployed", args.deployed, "--proposed", args.proposed] + (["--json"] if args.json else []))


def cmd_checkpoint(args) -> int:
    from jobs.operate import checkpoint

    return checkpoint.main([args.action, "--spec", args.spec] + (["--json"] if args.json else []))


def cmd_replay(args) -> int:
    from jobs.operate import replay

    return replay.main(["--spec", args.spec, "--cutover", args.cutover] + (["--dry-run"] if args.dry_run else []))


def cmd_runbook(args) -> int:
    from jobs.operate import runbooks

    try:
        text = runbooks.render(args.name, args.spec)
    except ValueError as exc:
        raise SystemExit(f"joinshift runbook: {exc}") from None
    if args.commands:
        for c in runbooks.commands(text):
            print(c.line + (f"  # exit {c.expect_exit}" if c.expect_exit else ""))
    else:
        print(text)
    return 0


def cmd_demo(args) -> int:
    from jobs.local.demo import run_demo

    return run_demo(spec_file=args.spec, workload_file=args.workload, slice_minutes=args.slice_minutes,
                    keep=args.keep, verbose=args.verbose)


# ------------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    try:
        from rich_argparse import RawDescriptionRichHelpFormatter as fmt
    except ImportError:  # pragma: no cover
        fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="joinshift", formatter_class=fmt,
        description="Move a daily batch join onto a streaming join, with numbers: run both side by "
                    "side on Kafka, Spark and Delta, compare match rates and window-boundary deltas.",
        epilog="Quick start: `joinshift demo` (starts a local Kafka broker, generates two days of "
               "search sessions, runs batch and streaming joins through Airflow, prints the comparison).",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, func, help: str):
        sp = sub.add_parser(name, help=help, description=help, formatter_class=fmt)
        sp.set_defaults(func=func)
        return sp

    def with_spec(sp):
        sp.add_argument("--spec", default=DEFAULT_SPEC, help=f"join spec YAML (default: {DEFAULT_SPEC})")
        return sp

    def with_ds(sp):
        sp.add_argument("--ds", type=_date, required=True, help="first ds, YYYY-MM-DD")
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

    with_ds(with_spec(cmd("land", cmd_land, "land both topics' ds into the daily Delta tables")))
    b = with_ds(with_spec(cmd("batch", cmd_batch, "run the batch baselines for a ds (or range)")))
    b.add_argument("--variant", action="append", choices=("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed"))
    s = with_spec(cmd("stream", cmd_stream, "run the streaming join (continuous, or one increment)"))
    s.add_argument("--available-now", action="store_true", help="process what is available, then stop")
    s.add_argument("--trigger-interval", help="continuous mode micro-batch interval, e.g. 30s (default: spec)")
    with_ds(with_spec(cmd("compare", cmd_compare, "match rates and boundary deltas per ds")))

    r = with_ds(with_spec(cmd("recommend", cmd_recommend,
                              "recommend a window and watermark delays from the landed days (one-pass sweep)")))
    r.add_argument("--target-share", type=float, default=0.995,
                   help="reach this share of the baseline's match rate (default 0.995)")
    r.add_argument("--target-drop-rate", type=float, default=0.001,
                   help="watermark delays drop at most this share of each stream (default 0.001)")
    r.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    at = with_ds(with_spec(cmd("attribute", cmd_attribute,
                               "why the stream missed what the batch matched, per cause and hour")))
    at.add_argument("--baseline", choices=("batch_1d_windowed", "batch_1d_2d", "batch_1d_1d"),
                    help="default: the spec's accuracy.baseline")
    with_ds(with_spec(cmd("report", cmd_report, "build the daily accuracy report (HTML + plots + JSON)")))
    pl = cmd("plan", cmd_plan, "compare a deployed spec with a new one: reuse the checkpoint, or replay?")
    pl.add_argument("--deployed", required=True, help="the spec the running job uses")
    pl.add_argument("--proposed", required=True, help="the spec you want to deploy")
    pl.add_argument("--json", action="store_true")
    ck = with_spec(cmd("checkpoint", cmd_checkpoint, "inspect, validate or back up the streaming checkpoint"))
    ck.add_argument("action", choices=("inspect", "validate", "backup"))
    ck.add_argument("--json", action="store_true")
    rp = with_spec(cmd("replay", cmd_replay, "rebuild the window by replaying Kafka into a fresh checkpoint"))
    rp.add_argument("--cutover", required=True, help="ISO-8601 instant from which the new run owns the output")
    rp.add_argument("--dry-run", action="store_true", help="check Kafka retention and print the plan only")
    rb = with_spec(cmd("runbook", cmd_runbook, "print a runbook filled with this pipeline's values"))
    rb.add_argument("name", help="restart_after_crash, change_the_window, recover_broken_checkpoint, "
                                 "replay_after_outage, cut_over_and_roll_back")
    rb.add_argument("--commands", action="store_true", help="print only the commands to run, in order")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
