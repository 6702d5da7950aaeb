"""``joinshift``: the command line of the product, and its only argument parser.

Every command takes the join spec (``--spec``, default :data:`jobs.spec.DEFAULT_SPEC`) and reads
its environment from ``JOINSHIFT_*`` variables or ``joinshift.yaml`` (see ``jobs/settings.py``).
A user error (bad spec, argument or missing input) is one line on stderr and a non-zero exit.
Logs go to ``<log_dir>/joinshift.log``; ``-v`` shows them on the console too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs import commands
from jobs.commands.common import (
    date_arg,
    interval_arg,
    positive_float_arg,
    positive_int_arg,
    slice_minutes_arg,
    user_errors,
)
from jobs.settings import EXIT_FILE_ENV, settings
from jobs.spec import DEFAULT_SPEC, DEFAULT_WORKLOAD

log = logging.getLogger("joinshift")


#: The engines whose versions a bug report needs beside joinshift's own.
_ENGINES = ("pyspark", "delta-spark", "apache-airflow", "great-expectations", "kafka-python")


class _Version(argparse.Action):
    """``--version``: joinshift's version and its engines', read when asked (not on every parse)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any):
        super().__init__(
            option_strings, dest, nargs=0, help="print the versions of joinshift and the engines it runs on"
        )

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        def of(dist: str) -> str:
            try:
                return version(dist)
            except PackageNotFoundError:
                return "not installed"

        print(f"joinshift {of('joinshift')} ({', '.join(f'{d} {of(d)}' for d in _ENGINES)})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    try:
        from rich_argparse import RawDescriptionRichHelpFormatter as fmt  # noqa: N813
    except ImportError:  # pragma: no cover
        fmt = argparse.RawDescriptionHelpFormatter  # type: ignore[assignment,misc]
    p = argparse.ArgumentParser(
        prog="joinshift",
        formatter_class=fmt,
        description="Move a daily batch join onto a streaming join, with numbers: run both side by "
        "side on Kafka, Spark and Delta, compare match rates and window-boundary deltas.",
        epilog="Quick start: `joinshift demo` (starts a local Kafka broker, generates two days of "
        "search sessions, runs batch and streaming joins through Airflow, prints the comparison).",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="logs (and Spark/Airflow warnings) on the console")
    p.add_argument("-V", "--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, formatter_class=fmt)
        sp.set_defaults(func=func)
        return sp

    def with_spec(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        _path(sp.add_argument("--spec", default=DEFAULT_SPEC, help=SPEC_HELP))
        return sp

    def with_ds(sp: argparse.ArgumentParser, required: bool = True) -> argparse.ArgumentParser:
        ds_help = "first ds, YYYY-MM-DD" + ("" if required else " (required unless --example)")
        sp.add_argument("--ds", type=date_arg, required=required, help=ds_help)
        sp.add_argument("--to", type=date_arg, help="last ds of a range (inclusive)")
        return sp

    k = cmd("kafka", commands.cmd_kafka, "start, stop or inspect the embedded Kafka broker (KRaft, loopback)")
    k.add_argument("action", choices=("start", "stop", "status"))
    k.add_argument(
        "--timeout",
        type=positive_float_arg,
        help="seconds to wait until it answers (start, default 60) or before SIGKILL (stop, default 30)",
    )

    ss = cmd(
        "spark-server",
        commands.cmd_spark_server,
        "start, stop or inspect a local Spark Connect server that short steps share instead of each "
        "starting a Spark JVM; `start` prints the URL to set as JOINSHIFT_SPARK_REMOTE",
    )
    ss.add_argument("action", choices=("start", "stop", "status"))
    ss.add_argument(
        "--port",
        type=int,
        help="port on 127.0.0.1 (default: the one JOINSHIFT_SPARK_REMOTE names, else 15002; 0: a free one)",
    )
    ss.add_argument(
        "--timeout",
        type=positive_float_arg,
        help="seconds to wait until it accepts clients (start, default 120) or before SIGKILL (stop, default 30)",
    )

    a = cmd(
        "airflow",
        commands.cmd_airflow,
        "run the `airflow` CLI against this project's local Airflow (e.g. `joinshift airflow standalone`)",
    )
    a.add_argument("airflow_args", nargs=argparse.REMAINDER, help="arguments for airflow")

    d = with_spec(
        cmd(
            "demo",
            commands.cmd_demo,
            "the main job: two generated days through batch and streaming joins side by side, then the comparison "
            "(exit 1 if a quality gate fails)",
        )
    )
    _path(d.add_argument("--workload", default=DEFAULT_WORKLOAD, help=f"workload YAML (default: {DEFAULT_WORKLOAD})"))
    d.add_argument(
        "--slice-minutes",
        type=slice_minutes_arg,
        default=60,
        help="simulated minutes of arrivals per streaming micro-batch (default: 60)",
    )
    d.add_argument(
        "--keep", action="store_true", help="keep the previous demo's topics and tables instead of starting clean"
    )

    g = with_spec(cmd("generate", commands.cmd_generate, "generate a workload and publish it to Kafka at once"))
    _path(g.add_argument("--workload", default=DEFAULT_WORKLOAD, help=f"workload YAML (default: {DEFAULT_WORKLOAD})"))
    g.add_argument("--dry-run", action="store_true", help="generate and print the summary; publish nothing")

    im = with_spec(
        cmd("import", commands.cmd_import, "publish your own files (Parquet, CSV, JSON lines) to the spec's topics")
    )
    _path(im.add_argument("--left", metavar="FILE", help="the left stream's rows (a file or a folder of them)"))
    _path(im.add_argument("--right", metavar="FILE", help="the right stream's rows"))
    im.add_argument(
        "--arrival",
        metavar="COLUMN",
        help="the column holding each row's arrival time (default: the side's format.arrival)",
    )
    im.add_argument("--partitions", type=int, default=2, help="partitions of topics it creates (default: 2)")
    ld = with_ds(with_spec(cmd("land", commands.cmd_land, "land both topics' ds into the daily Delta tables")))
    ld.add_argument("--side", choices=("left", "right"), action="append", help="one side only (default: both)")
    b = with_ds(
        with_spec(cmd("batch", commands.cmd_batch, "run the batch baselines and the reference for a ds (or range)"))
    )
    b.add_argument("--variant", action="append", choices=commands.BATCH_CHOICES, help="repeatable; default: all four")
    s = with_spec(cmd("stream", commands.cmd_stream, "run the streaming join (continuous, or one increment)"))
    s.add_argument("--available-now", action="store_true", help="process what is available, then stop")
    s.add_argument(
        "--trigger-interval", type=interval_arg, help="continuous mode micro-batch interval, e.g. 30s (default: spec)"
    )
    ra = with_spec(
        cmd(
            "replay-as-live",
            commands.cmd_replay_as_live,
            "a faithful trial of the stream over the topics' history: one increment per slice of arrival time",
        )
    )
    ra.add_argument("--from", dest="from_ds", type=date_arg, help="first arrival day (default: every day held)")
    ra.add_argument("--to", type=date_arg, help="last arrival day (default: --from)")
    ra.add_argument("--slice", default="30m", help="record time per slice and micro-batch, e.g. 30m, 1h (default: 30m)")
    ra.add_argument(
        "--as",
        dest="as_pipeline",
        help="run the trial as this pipeline name (its own output and checkpoint), reading the spec's topics",
    )
    c = with_ds(with_spec(cmd("compare", commands.cmd_compare, "match rates and boundary deltas per ds")))
    c.add_argument("--hourly", action="store_true", help="also print match rates per hour of the left event time")

    sw = with_ds(
        with_spec(
            cmd("sweep", commands.cmd_sweep, "match rate of every candidate window in one pass over the landed days")
        )
    )
    sw.add_argument(
        "--grid",
        default="lower=-6h..0/30m,upper=0..6h/30m",
        help='candidate windows: each bound from..to/step (default "lower=-6h..0/30m,upper=0..6h/30m")',
    )
    sw.add_argument(
        "--right-days",
        choices=("same", "neighbours"),
        default="same",
        help="same: right ds = left ds (batch_1d_windowed); neighbours: every ds the window reaches (reference)",
    )
    r = with_ds(
        with_spec(
            cmd(
                "recommend",
                commands.cmd_recommend,
                "recommend a window and watermark delays from the landed days (one-pass sweep; "
                "for the paced engine a window, each run by its own rules)",
            )
        )
    )
    r.add_argument(
        "--output-latency", help="p99 event -> output budget, e.g. 1h (default: the spec's budgets.output_latency)"
    )
    r.add_argument("--state-memory", help="state memory budget, e.g. 2GiB (default: the spec's budgets.state_memory)")
    r.add_argument(
        "--slice-minutes",
        type=slice_minutes_arg,
        help="choose for replay-as-live with these slices (default: live at the spec's trigger interval); "
        "--verify's trial replays with them (default 30)",
    )
    r.add_argument(
        "--verify",
        action="store_true",
        help="run the chosen settings with replay-as-live over the same days and print predicted vs measured "
        "(exit 1 when the match rate is off by more than 0.05 pp)",
    )
    r.add_argument(
        "--trial-slice",
        help="--verify's trial: record time per replayed slice and micro-batch, e.g. 30m, 2h (default: "
        "--slice-minutes, else 30m); coarser slices run sooner, the prediction is made for the same slices",
    )
    r.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    at = with_ds(
        with_spec(
            cmd(
                "attribute",
                commands.cmd_attribute,
                "stream − baseline as terms that add up, and why the stream missed what the baseline matched",
            )
        )
    )
    at.add_argument(
        "--baseline",
        help="the variant the stream is held to (batch_1d_1d, batch_1d_2d, batch_1d_windowed, ...; "
        "default: the spec's accuracy.baseline)",
    )
    at.add_argument("--json", action="store_true", help="print the account and the miss causes as JSON")
    qa = with_spec(cmd("quality", commands.cmd_quality, "data-quality suites from the spec, and the gates for a ds"))
    qa.add_argument(
        "action",
        choices=("write-suites", "check-suites", "run"),
        help="write-suites: the spec's suites as files; check-suites: exit 1 if the files differ "
        "from the spec's; run: the gates for --ds, recorded, exit 1 if one failed",
    )
    qa.add_argument("--ds", type=date_arg, help="the ds the gates check (for `run`), YYYY-MM-DD")
    qa.add_argument("--dir", help="GX file context (default: expectations/)")
    qa.add_argument(
        "--kind", action="append", help="only this gate (repeatable): raw_left, raw_right, join_output, accuracy"
    )
    rep = with_ds(
        with_spec(cmd("report", commands.cmd_report, "build the daily accuracy report (HTML + plots + JSON)")),
        required=False,
    )
    rep.add_argument("--example", action="store_true", help="render the report on example numbers (no Spark)")
    rep.add_argument(
        "--out", default="var/example-reports", help="where --example writes (default var/example-reports)"
    )

    pl = cmd(
        "plan",
        commands.cmd_plan,
        "compare a deployed spec with a new one: reuse the checkpoint (exit 0), or replay (exit 3)?",
    )
    _path(
        pl.add_argument(
            "--deployed", required=True, help="the spec the running job uses (a relative path as for --spec)"
        )
    )
    _path(pl.add_argument("--proposed", required=True, help="the spec you want to deploy"))
    pl.add_argument("--json", action="store_true", help="print the plan as JSON (the exit code stays 0 or 3)")
    ck = with_spec(cmd("checkpoint", commands.cmd_checkpoint, "inspect, validate or back up the streaming checkpoint"))
    ck.add_argument("action", choices=("inspect", "validate", "backup"))
    ck.add_argument("--checkpoint", help="checkpoint folder (default: the spec's stream_join checkpoint)")
    ck.add_argument("--query", default="stream_join", help="query whose checkpoint to use (default stream_join)")
    ck.add_argument("--json", action="store_true", help="print the result as JSON")
    ck.add_argument(
        "--stop", action="store_true", help="backup: stop a running stream for the copy (its supervisor restarts it)"
    )
    rp = with_spec(cmd("replay", commands.cmd_replay, "rebuild the window by replaying Kafka into a fresh checkpoint"))
    rp.add_argument("--cutover", required=True, help="ISO-8601 instant from which the new run owns the output")
    rp.add_argument("--dry-run", action="store_true", help="check Kafka retention and print the plan only")
    sv = with_spec(
        cmd(
            "supervise",
            commands.cmd_supervise,
            "run the continuous join as its own process; restart it on exit or stall",
        )
    )
    sv.add_argument("--checks", type=positive_int_arg, default=54, help="health checks before returning (default 54)")
    sv.add_argument("--interval", type=positive_float_arg, default=10, help="seconds between checks (default 10)")
    sv.add_argument(
        "--stall-after",
        type=positive_float_arg,
        help="seconds without a micro-batch while records wait before a restart (default: the spec's "
        "health.max_batch_age)",
    )
    sv.add_argument(
        "--trigger-interval", type=interval_arg, help="the stream's micro-batch interval, e.g. 30s (default: spec)"
    )
    sv.add_argument("--stop", action="store_true", help="stop the supervised process and exit")
    he = with_spec(
        cmd(
            "health",
            commands.cmd_health,
            "stream health now: lag, state, last micro-batch, restarts, watermark vs PT, late drops, "
            "against the spec's health thresholds (exit 1 on a warning)",
        )
    )
    he.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    he.add_argument(
        "--kafka-timeout",
        type=positive_float_arg,
        default=5,
        help="seconds to wait for Kafka before using the health log (default 5)",
    )
    rb = with_spec(cmd("runbook", commands.cmd_runbook, "print a runbook filled with this pipeline's values"))
    rb.add_argument(
        "name",
        help="restart_after_crash, change_the_window, recover_broken_checkpoint, "
        "replay_after_outage, cut_over_and_roll_back",
    )
    rb.add_argument("--commands", action="store_true", help="print only the commands to run, in order")
    _gate_parser(cmd("gate", commands.cmd_gate, "the cut-over gate: shadow -> canary -> cutover -> retired"), fmt)
    st = cmd(
        "settings",
        commands.cmd_settings,
        "the settings in effect and where each comes from: default, the settings file "
        "(JOINSHIFT_CONFIG or joinshift.yaml) or a JOINSHIFT_* variable; credentials hidden",
    )
    st.add_argument("--json", action="store_true", help="as JSON: a list of {setting, value, from}")
    co = cmd(
        "completion",
        _completion,
        'print a tab-completion script for your shell, e.g. `eval "$(joinshift completion bash)"` '
        "in ~/.bashrc (zsh: `joinshift completion zsh > ~/.zfunc/_joinshift`)",
    )
    co.add_argument("shell", choices=("bash", "zsh"))
    return p


#: A relative spec path is the current folder's file, else the project's (``jobs.spec.spec_path``).
SPEC_HELP = f"join spec YAML; a relative path: the current folder's, else the project's (default: {DEFAULT_SPEC})"


def _path(action: argparse.Action) -> None:
    """A file-path argument: the completion scripts complete file names there."""
    import shtab

    action.complete = shtab.FILE  # type: ignore[attr-defined]


def _completion(args: argparse.Namespace) -> int:
    """The script is made from this parser (shtab), so it knows every command and option there is."""
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def _gate_parser(gp: argparse.ArgumentParser, fmt: type[argparse.HelpFormatter]) -> None:
    """``joinshift gate status|evaluate|promote|rollback|view``."""
    gsub = gp.add_subparsers(dest="gate_action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        a = gsub.add_parser(name, help=help, description=help, formatter_class=fmt)
        _path(a.add_argument("--spec", default=DEFAULT_SPEC, help=SPEC_HELP))
        a.add_argument("--json", action="store_true", help="print JSON")
        return a

    action("status", "stage, days meeting the SLO / required, and why the next promotion waits")
    ev = action("evaluate", "check a ds (or range) against the SLO and record the evidence")
    ev.add_argument("--ds", type=date_arg, required=True, help="first ds, YYYY-MM-DD")
    ev.add_argument("--to", type=date_arg, help="last ds of a range (inclusive)")
    pr = action("promote", "one stage on; refused (exit 2, saying why) until the SLO held for the required days")
    pr.add_argument("--force", action="store_true", help="promote without the days met (needs --reason)")
    pr.add_argument("--reason", help="why (recorded with the decision)")
    pr.add_argument("--by", help="who decides (default: the OS user)")
    rb = action(
        "rollback",
        "back to an earlier stage (default shadow, where batch serves again and its DAG runs; --to picks it)",
    )
    rb.add_argument("--to", choices=("shadow", "canary", "cutover"), help="the stage to go back to (default shadow)")
    rb.add_argument("--reason", help="why (recorded with the decision)")
    rb.add_argument("--by", help="who decides (default: the OS user)")
    vw = action("view", "which table the public (or canary) view reads now, and its row count")
    vw.add_argument("--canary", action="store_true", help="the canary view instead of the public one")


_HANDLER = "joinshift-cli"


def _configure_logging(verbose: bool) -> None:
    """Everything to ``<log_dir>/joinshift.log``; the console gets it only with ``-v``."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:  # one set, however often main() runs
        root.removeHandler(old)
        old.close()
    handlers: list[logging.Handler] = []
    try:
        log_dir = Path(settings().log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_dir / "joinshift.log"))
    except OSError:
        pass
    console = logging.StreamHandler()
    console.setLevel(logging.DEBUG if verbose else logging.ERROR)
    handlers.append(console)
    for h in handlers:
        h.set_name(_HANDLER)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
    if verbose:
        os.environ.setdefault("JOINSHIFT_SPARK_CONSOLE_LEVEL", "warn")  # Spark's WARN lines too
    else:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # a down broker's refusals are expected


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The sub-parser that parsed ``args``' command (and gate action)."""
    for dest in ("command", "gate_action"):
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, dest, None)
        if subs is None or name not in subs.choices:
            break
        parser = subs.choices[name]
    return parser


class CommandFailed(SystemExit):
    """How a command ends on a user error: the message was printed to stderr; the process exits
    with ``code``; ``str()`` is the message (what callers in Python and tests see)."""

    def __init__(self, message: str, code: int):
        super().__init__(code)
        self.message = message

    def __str__(self) -> str:
        return self.message


def main(argv: list[str] | None = None) -> int:
    exit_file = os.environ.pop(EXIT_FILE_ENV, None)  # this process's to write, not its children's
    code: int | str | None = 1  # an exception no handler below turns into a line: Python exits 1
    try:
        code = _main(argv)
        return code
    except SystemExit as exc:
        code = exc.code
        raise
    finally:
        if exit_file:
            _record_exit(exit_file, code)


def _record_exit(path: str, code: int | str | None) -> None:
    """How this process ended, where the process that started it asked (``EXIT_FILE_ENV``): a
    supervisor that did not start it (a later sensor poke) reads it there."""
    status = code & 0xFF if isinstance(code, int) else 0 if code is None else 1  # what the OS reports
    with contextlib.suppress(OSError):
        tmp = Path(path).with_name(Path(path).name + ".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "exit_code": status}) + "\n")
        tmp.replace(path)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command's own parser, with its usage, not the top level's
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        _configure_logging(args.verbose)
        return int(args.func(args) or 0)
    except commands.UserError as exc:
        message, code = str(exc), exc.code
    except user_errors() as exc:
        message = str(exc) or type(exc).__name__
        # refused as asked: running it again gets the same answer (a supervisor does not restart it)
        refused = ("SpecError", "GridError", "SettingsError", "CheckpointSpecMismatch")
        code = commands.EXIT_USAGE if type(exc).__name__ in refused else 1
    except KeyboardInterrupt:  # Ctrl-C: Spark's jobs are cancelled (pyspark's handler); no traceback
        message, code = "interrupted", 130
    except OSError as exc:
        if exc.filename is None:  # not a path's fault (a socket, a process): a bug to see whole
            raise
        # a path the user named (--out, a spec) or one under the configured folders (storage_root,
        # log_dir): one line to fix it by; the traceback goes to the log file only
        logging.getLogger(__name__).info("%s failed on a path", args.command, exc_info=True)
        message, code = f"{exc.filename}: {exc.strerror or exc}; check the path and its permissions", 1
    # a spec error names every bad field, one per line; anything else is one line
    text = f"joinshift {args.command}: {message}"
    print(text, file=sys.stderr)
    raise CommandFailed(text, code)


if __name__ == "__main__":
    raise SystemExit(main())
