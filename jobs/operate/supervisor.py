"""Restart management for the continuous streaming join (paper §6.1 restarts, §6.4 backlog, §7.3).

The join runs as its **own OS process** (:mod:`jobs.operate.process`); a light supervisor (no
Spark, no JVM) watches it: every check is a health sample (:mod:`jobs.operate.health`); a process
that exited or stalled is restarted from the same checkpoint with exponential backoff; giving up
or a backlog on both streams raises an alert. :class:`Supervisor` is one check at a time (the
Airflow sensor's poke); :func:`supervise` loops it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs.operate.health import health, iso, record_restart, write_health
from jobs.operate.process import EXIT_REFUSED, StreamProcess
from jobs.settings import Settings, settings
from jobs.spec import JoinSpec
from jobs.storage.hold import current_hold, describe_hold, supervisor_dir

log = logging.getLogger("joinshift.supervisor")

AlertHook = Callable[[str, str], None]


def _now() -> float:
    return time.time()


# ------------------------------------------------------------------ supervision


@dataclass
class SupervisionReport:
    pipeline: str
    checks: int = 0
    restarts: list[dict[str, Any]] = field(default_factory=list)  # {at, reason, backoff_s, pid}
    states: dict[str, int] = field(default_factory=dict)
    alerts: list[dict[str, str]] = field(default_factory=list)
    last: dict[str, Any] | None = None
    gave_up: bool = False
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def log_alert(kind: str, message: str) -> None:
    log.error("ALERT [%s] %s", kind, message)


class Supervisor:
    """One pipeline's supervision, one :meth:`check` at a time: the loop of :func:`supervise` and
    the pokes of the ``joinshift_supervise`` sensor both drive it. What it must remember between
    checks (restarts in a row for the backoff, the batch seen at the last restart, whether a hold
    was on, the report so far) is :meth:`memory`, which a sensor keeps in a file between pokes.

    The n-th restart in a row waits ``backoff_s[n]`` (the last value repeats) before starting;
    a new micro-batch after a restart resets the count. More than ``max_restarts`` restarts raise
    the ``restart_limit`` alert and end supervision (``gave_up``). While a maintenance
    :func:`hold` is on (a replay owns the checkpoint), it neither starts nor restarts the process
    and counts the checks as ``held``; when the hold ends it starts it.
    """

    def __init__(
        self,
        spec: JoinSpec,
        s: Settings | None = None,
        *,
        spec_path: str | Path,
        stall_after_s: float | None = None,
        backlog_threshold_s: float | None = None,
        max_restarts: int = 10,
        backoff_s: Sequence[float] = (1, 2, 4, 8, 16, 32, 60),
        trigger_interval: str | None = None,
        on_alert: AlertHook | None = log_alert,
        stop: threading.Event | None = None,
        process: StreamProcess | None = None,
        bootstrap: str | None = None,
        env: dict[str, str] | None = None,
        on_restart: Callable[[dict[str, Any]], None] | None = None,
        memory: dict[str, Any] | None = None,
    ):
        self.spec, self.s = spec, s or settings()
        # the spec's health thresholds unless a caller overrides them (one threshold per rule)
        self.stall_after_s = stall_after_s if stall_after_s is not None else spec.health.max_batch_age.total_seconds()
        self.backlog_threshold_s = (
            backlog_threshold_s if backlog_threshold_s is not None else spec.health.max_lag_time.total_seconds()
        )
        self.max_restarts, self.backoff_s = max_restarts, tuple(backoff_s)
        self.alert = on_alert or (lambda kind, msg: None)
        self.stop, self.bootstrap, self.on_restart = stop, bootstrap, on_restart
        self.proc = process or StreamProcess(spec_path, spec, self.s, trigger_interval=trigger_interval, env=env)
        m = memory or {}
        self.report = SupervisionReport(**m["report"]) if "report" in m else SupervisionReport(spec.pipeline)
        self.in_a_row: int = m.get("in_a_row", 0)
        self.batch_at_restart: int | None = m.get("batch_at_restart")
        self.was_held: bool = m.get("was_held", False)

    def memory(self) -> dict[str, Any]:
        return {
            "report": self.report.as_dict(),
            "in_a_row": self.in_a_row,
            "batch_at_restart": self.batch_at_restart,
            "was_held": self.was_held,
        }

    def _wait(self, seconds: float) -> bool:
        """Sleep; False if ``stop`` was set meanwhile."""
        if self.stop is not None:
            return not self.stop.wait(seconds)
        time.sleep(seconds)
        return True

    def _restarted(self, entry: dict[str, Any]) -> None:
        """A (re)start: in this supervision's report and in the pipeline's restart log."""
        self.report.restarts.append(entry)
        record_restart(self.spec, self.s, entry)

    def ensure_started(self) -> None:
        """Adopt the running process (pid file) or start it, unless the pipeline is held."""
        held = current_hold(self.spec, self.s)
        self.was_held = self.was_held or held is not None
        if not self.proc.alive() and not self.proc.find() and held is None:
            self.proc.start()
            if not self.proc.adopted:
                self._restarted({"at": iso(_now()), "reason": "not running", "backoff_s": 0, "pid": self.proc.pid})
        self.report.pid = self.proc.pid

    def check(self) -> bool:
        """One health check, and a restart if it exited or stalled. False: supervision must end
        (it gave up, or ``stop`` was set during a backoff)."""
        spec, s, report, proc = self.spec, self.s, self.report, self.proc
        if not proc.alive():
            proc.find()  # adopt what an earlier check or poke started (a sensor's poke starts with no pid)
        held = current_hold(spec, s)
        if held is not None:  # a replay owns the checkpoint: hands off
            report.checks += 1
            report.states["held"] = report.states.get("held", 0) + 1
            report.last = {
                "sampled_at": iso(_now()),
                "state": "held",
                "reason": describe_hold(held),
            }
            if held.get("failed") and not any(a["kind"] == "hold_failed" for a in report.alerts):
                # nothing restarts by itself from here: someone must run the job again
                msg = f"{spec.pipeline}: {describe_hold(held)}"
                report.alerts.append({"kind": "hold_failed", "message": msg})
                self.alert("hold_failed", msg)
            self.was_held = True
            return True
        if self.was_held:  # the hold ended (a replay finished): start from the new checkpoint, no backoff
            self.was_held = False
            if not proc.alive() and not proc.find():
                proc.start()
                if not proc.adopted:
                    self._restarted({"at": iso(_now()), "reason": "hold ended", "backoff_s": 0, "pid": proc.pid})
        h = health(
            spec,
            s,
            stall_after_s=self.stall_after_s,
            backlog_threshold_s=self.backlog_threshold_s,
            process=proc,
            bootstrap=self.bootstrap,
        )
        report.checks += 1
        report.states[h.state] = report.states.get(h.state, 0) + 1
        report.last = h.row()
        write_health(None, spec, s, h)
        if (
            h.last_batch_id is not None
            and self.batch_at_restart is not None
            and h.last_batch_id != self.batch_at_restart
            and h.state in ("running", "backlogged")
        ):
            self.in_a_row = 0
        if h.state == "backlogged":
            report.alerts.append({"kind": "backlogged", "message": h.reason})
            self.alert("backlogged", f"{spec.pipeline}: {h.reason}")
        if h.state not in ("exited", "stalled"):
            report.pid = proc.pid
            return True
        if len(report.restarts) >= self.max_restarts:
            report.gave_up = True
            msg = f"{spec.pipeline}: {len(report.restarts)} restarts, giving up ({h.state}: {h.reason})"
            report.alerts.append({"kind": "restart_limit", "message": msg})
            self.alert("restart_limit", msg)
            return False
        wait = self.backoff_s[min(self.in_a_row, len(self.backoff_s) - 1)] if self.backoff_s else 0
        rc = proc.returncode()
        said = proc.last_words() if rc else ""
        reason = f"{h.state}: {h.reason}" + (
            f" (exit code {rc}{': ' + said if said else ''})" if rc is not None else ""
        )
        if rc == EXIT_REFUSED:  # the spec, settings or arguments were refused: a restart gets the same answer
            report.gave_up = True
            msg = f"{spec.pipeline}: the stream refuses to start, not restarting ({reason})"
            report.alerts.append({"kind": "refused", "message": msg})
            self.alert("refused", msg)
            return False
        if not proc.claim_restart(wait):  # another supervisor saw it fail first: its alert and restart
            log.info("%s: another supervisor is restarting the stream (%s)", spec.pipeline, reason)
            return True
        try:
            self.alert("restart", f"{spec.pipeline}: restarting in {wait}s after {reason}")
            if h.state == "stalled":
                proc.stop(timeout=10)
            if wait and not self._wait(wait):
                return False
            proc.start()
        finally:  # started (the pid file names it), or abandoned (stopped during the backoff, a failure)
            proc.release_restart()
        if proc.adopted:  # another supervisor restarted it meanwhile: its restart, not this one's
            report.pid = proc.pid
            return True
        self.in_a_row, self.batch_at_restart = self.in_a_row + 1, h.last_batch_id
        entry = {"at": iso(_now()), "reason": reason, "backoff_s": wait, "pid": proc.pid}
        self._restarted(entry)
        report.pid = proc.pid
        if self.on_restart:
            self.on_restart(entry)
        return True


def supervise(
    spec: JoinSpec,
    s: Settings | None = None,
    *,
    spec_path: str | Path,
    checks: int = 54,
    interval_s: float = 10,
    stop: threading.Event | None = None,
    **options: Any,
) -> SupervisionReport:
    """Ensure the stream process runs, check it ``checks`` times every ``interval_s`` seconds, and
    restart it from its checkpoint when it exited or stalled (:class:`Supervisor`; ``options``
    are its keyword arguments). ``stop`` ends the loop early; the process keeps running either
    way (the next call adopts it by pid file)."""
    sup = Supervisor(spec, s, spec_path=spec_path, stop=stop, **options)
    sup.ensure_started()
    for i in range(checks):
        if stop is not None and stop.is_set():
            break
        if i and not sup._wait(interval_s):
            break
        if not sup.check():
            break
    return sup.report


def supervise_step(
    spec: JoinSpec, s: Settings | None = None, *, spec_path: str | Path, watch: str, watch_s: float, **options: Any
) -> tuple[bool, SupervisionReport]:
    """One poke of the ``joinshift_supervise`` sensor: one check of the watch ``watch`` (e.g. the
    Airflow run id), remembering backoff and the report across pokes in a file beside the pid
    file. Returns (the watch lasted ``watch_s``, the report so far)."""
    f = supervisor_dir(spec, s) / "watch.json"
    memory: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(f.read_text())
        # a retry of a watch that gave up starts over, with a fresh restart budget
        if saved.get("watch") == watch and not saved["memory"]["report"].get("gave_up"):
            memory = saved
    sup = Supervisor(spec, s, spec_path=spec_path, memory=memory.get("memory"), **options)
    started = memory.get("started", _now())
    if not memory:
        sup.ensure_started()
    going = sup.check()
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"watch": watch, "started": started, "memory": sup.memory()}))
    tmp.replace(f)
    return (not going) or _now() - started >= watch_s, sup.report
