"""What every command body shares: the user-error type, exit codes, spec/Spark/Kafka openers."""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import threading
from datetime import date
from typing import Any

from jobs.join.variants import DAILY_VARIANTS

#: What ``joinshift batch --variant`` and ``attribute --baseline`` take: the daily variants.
BATCH_CHOICES = DAILY_VARIANTS
EXIT_USAGE = 2


# -- argument types: a bad value is argparse's one line, with the command's usage


def date_arg(value: str) -> date:
    from jobs.spec.days import parse_day

    try:
        return parse_day(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def day_range(first: date | None, last: date | None, names: tuple[str, str] = ("--from", "--to")) -> list[date]:
    """:func:`jobs.spec.days.day_span` of two flags: a refusal is a usage error naming them."""
    from jobs.spec.days import day_span

    try:
        return day_span(first, last, names)
    except ValueError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None


def _positive(value: str, number: type[int] | type[float], what: str) -> Any:
    try:
        x = number(value)
    except ValueError:
        x = 0
    if not x > 0 or math.isinf(x):  # also nan, which argparse's float let through, as it did -1
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive {what}")
    return x


def positive_int_arg(value: str) -> int:
    return int(_positive(value, int, "whole number"))


def slice_minutes_arg(value: str) -> int:
    """Whole minutes of record time per replayed slice, by the replay's one rule (up to a day)."""
    from jobs.steps.replay_live import MAX_SLICE_MINUTES, check_slice

    try:
        return int(check_slice(positive_int_arg(value)))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a slice: whole minutes up to {MAX_SLICE_MINUTES} (a day), e.g. 30"
        ) from None


def positive_float_arg(value: str) -> float:
    """Seconds and the like: a number above zero."""
    return float(_positive(value, float, "number"))


def interval_arg(value: str) -> str:
    """A positive duration in joinshift's one grammar (``30s``, ``2m``), passed on as written."""
    from jobs.spec.duration import parse_duration

    try:
        ok = parse_duration(value).total_seconds() > 0
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not ok:
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive duration, e.g. 30s")
    return value


class UserError(Exception):
    """Something the user can fix; the message says what. Printed as one line, exit ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix (besides :class:`UserError`): one line, never a traceback,
    in the CLI and in an Airflow task's log alike."""
    from jobs.accuracy.grid import GridError
    from jobs.settings import SettingsError
    from jobs.spec import SpecError
    from jobs.steps.importing import ImportRefused
    from jobs.steps.replay_live import ReplayRefused
    from jobs.storage.checkpoints import CheckpointError
    from jobs.storage.delta_io import MissingInput
    from jobs.storage.fs import RemoteFilesUnreachable
    from jobs.storage.hold import CheckpointBusy
    from jobs.storage.kafka import KafkaUnavailable, RetentionGap
    from jobs.storage.spark import ConnectUnavailable, SessionKindConflict
    from jobs.storage.spark_gateway import SparkMasterUnavailable
    from jobs.workload.publisher import PublishFailed

    return (
        SpecError,
        SettingsError,
        MissingInput,
        KafkaUnavailable,
        RetentionGap,
        CheckpointError,
        GridError,
        ReplayRefused,
        ImportRefused,
        CheckpointBusy,
        RemoteFilesUnreachable,
        SessionKindConflict,
        ConnectUnavailable,
        SparkMasterUnavailable,
        PublishFailed,
    )


def _ds_range(args: argparse.Namespace) -> list[date]:
    return day_range(args.ds, args.to, ("--ds", "--to"))


def _load_spec(path: str) -> Any:
    from jobs.spec import load_spec, spec_path

    return load_spec(spec_path(path))


def _spark(name: str, *, classic: bool = False, throughput: bool = True) -> Any:
    """The process's Spark session: a Spark Connect client when ``spark_remote`` is set, unless
    ``classic`` (the streaming commands: a driver of their own, see ``jobs.storage.spark``). Every
    command runs to its end but the continuous stream, so a driver started here runs the
    throughput collector unless the caller says ``throughput=False``."""
    from jobs.storage.spark import get_spark

    return get_spark(f"joinshift-{name}", classic=classic, throughput=throughput)


def _bootstrap(check: bool = True) -> str:
    """Kafka's bootstrap servers; with ``check``, one that answers (else one line, before Spark starts)."""
    from jobs.storage.kafka import bootstrap_servers, check_reachable

    return check_reachable(bootstrap_servers()) if check else bootstrap_servers()


def _console() -> Any:
    from rich.console import Console

    return Console(width=max(140, Console().width))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _service_action(service: Any, args: argparse.Namespace, error: type[Exception], start_timeout: float) -> int:
    """``start`` (prints what to connect to), ``stop`` or ``status`` (JSON) of a local service;
    its errors are one line."""
    try:
        if args.action == "start":
            print(service.start(timeout=args.timeout or start_timeout))
        elif args.action == "stop":
            service.stop(timeout=args.timeout or 30)
        else:
            _print_json(service.status())
    except error as e:
        raise UserError(str(e)) from None
    return 0


def _stop_on_signals(command: str, doing: str) -> threading.Event:
    """SIGTERM (the supervisor's stop, a plain ``kill``) or Ctrl-C sets the returned event,
    so the command ends its work in order (``doing`` says how); the same signal again ends the
    process at once."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        signal.signal(signum, signal.SIG_DFL)
        stop.set()
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        logging.getLogger("joinshift.cli").info("%s: %s on %s", command, doing, name)
        print(f"joinshift {command}: {name}: {doing} ({name} again to stop at once)", file=sys.stderr, flush=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop
