"""Chaos harness for the supervised streaming join (``bench/chaos.py``, ``tests/integration/test_chaos.py``).

:func:`chaos_run` lets :func:`jobs.operate.supervisor.supervise` run the stream process of a spec
and SIGKILLs it at seeded random moments (optionally bouncing the Kafka broker); every kill lands
shortly after the restarted process's first output commit plus a random 0-1.5 s, i.e. during the
progress/offset commit or the next micro-batch. :func:`isolated_spec`, :func:`paced_corrections_spec`,
:func:`publish_workload`, :func:`reference_output` and :func:`output_rows` set up a pipeline of its
own and the uninterrupted ``availableNow`` run its output must equal; :func:`delta_version`, :func:`progress_lines`,
:func:`input_drained` and :func:`wait_until` watch it without Spark.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobs.settings import Settings

#: Watermarks shorter than the demo workload's lateness (clicks arrive up to hours late): rows are
#: dropped as late, and which ones depends on the micro-batches, which a restart must repeat.
SHORT_WATERMARKS = {"left": timedelta(0), "right": timedelta(minutes=5)}


def isolated_spec(spec, name: str, max_offsets: int | None, watermarks: dict | None = None):
    """Own topics, tables and checkpoints; watermarks as wide as the validity window, so no record
    is late and the output cannot depend on how the backlog is cut into micro-batches; or
    ``watermarks`` (side -> timedelta) shorter than the data's lateness, so rows are dropped as
    late, and which ones depends on the micro-batches (a restart must repeat them exactly)."""

    def side(st, tag: str):
        delay = (watermarks or {}).get(tag, spec.timestamp_validity.max_past)
        return st.model_copy(update={"topic": f"{name}_{tag}", "watermark_delay": delay})

    return spec.model_copy(
        update={
            "pipeline": name,
            "left": side(spec.left, "left"),
            "right": side(spec.right, "right"),
            "streaming": spec.streaming.model_copy(update={"max_offsets_per_trigger": max_offsets}),
        }
    )


def paced_corrections_spec(spec, name: str):
    """The paced engine with late corrections, as its chaos test runs it: :func:`isolated_spec`, 30
    records a stream and micro-batch (fine enough pacing that some clicks are read after their
    window closed, so corrections happen: at 45 one of 541 rows was, at 60 none; 2026-11-26),
    corrections for 6 h."""
    from jobs.spec import Corrections, Engine

    base = isolated_spec(spec, name, max_offsets=None)
    paced = base.streaming.paced.model_copy(update={"max_records_per_batch": 30})
    streaming = base.streaming.model_copy(update={"engine": Engine.paced, "paced": paced})
    return base.model_copy(
        update={"streaming": streaming, "corrections": Corrections.model_validate({"horizon": "6h"})}
    )


def publish_workload(base_spec, spec, bootstrap: str, left_events: int, seed: int) -> int:
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    wl = generate(WorkloadParams(left_events_per_day=left_events, days=1, seed=seed), base_spec)
    records = wl.records.assign(
        topic=wl.records.topic.map({base_spec.left.topic: spec.left.topic, base_spec.right.topic: spec.right.topic})
    )
    for st in (spec.left, spec.right):
        create_topic(bootstrap, st.topic)
    publish(records, bootstrap)
    return len(records)


def reference_output(spark, spec, bootstrap: str, s: Settings) -> list[tuple]:
    """One uninterrupted availableNow run, in-process (its spec may cut micro-batches differently
    only with wide watermarks: then the output does not depend on it)."""
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.progress import JOIN_QUERY, settle_log
    from jobs.storage.tables import Tables

    (q,) = start_streaming_join(spark, spec, bootstrap=bootstrap, s=s, available_now=True, quarantine=False)
    q.awaitTermination()
    settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)  # its drops are on record
    return output_rows(spark, spec, s)


def dropped_as_late(spec, s: Settings) -> int:
    """Input rows the join's watermark dropped, over every micro-batch of its progress log."""
    from jobs.operate.stream_health import late_drops
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    return late_drops(read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY)), float("inf"))[0]


def output_rows(spark, spec, s: Settings) -> list[tuple]:
    from jobs.storage.tables import Tables

    df = spark.read.format("delta").load(Tables.of(spec, s).output("stream"))
    return sorted(tuple(r) for r in df.select("left_event_id", "right_event_id").collect())


def delta_version(path: str) -> int:
    """The table's latest version from its ``_delta_log`` file names (-1: no table yet); no Spark."""
    log = Path(path) / "_delta_log"
    versions = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()] if log.exists() else []
    return max(versions, default=-1)


def progress_lines(spec, s: Settings) -> int:
    from jobs.storage.tables import Tables

    p = Path(Tables.of(spec, s).progress_log("stream_join"))
    return len(p.read_bytes().splitlines()) if p.exists() else 0


def wait_until(cond, timeout: float, step: float = 0.2) -> bool:
    """Poll ``cond()`` every ``step`` seconds until it is true (True) or ``timeout`` passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def chaos_run(
    spec,
    spec_path: str | Path,
    s: Settings,
    bootstrap: str,
    *,
    kills: int,
    seed: int,
    broker=None,
    broker_bounce_after: int | None = None,
    stops_at: tuple[int, ...] = (),
    trigger_interval: str = "1s",
    stall_after_s: float = 240,
    step_timeout_s: float = 360,
    finish_timeout_s: float = 300,
    backoff_s=(0.5, 1, 2, 4, 8),
    log=print,
) -> dict[str, Any]:
    """Supervise the stream process of ``spec`` (settings ``s``) and SIGKILL it ``kills`` times
    (the ones numbered in ``stops_at`` are the supervisor's stop instead: SIGTERM, the stream ends
    between micro-batches, and the supervisor starts it again); bounce ``broker`` (stop, start:
    same port and data) after kill ``broker_bounce_after``; then let it drain (lag 0 on both
    streams, no new micro-batch for a few seconds) and stop it."""
    from jobs.operate.process import StreamProcess
    from jobs.operate.supervisor import supervise
    from jobs.storage.tables import Tables

    out_path = Tables.of(spec, s).output("stream")
    rng = random.Random(seed)
    proc = StreamProcess(spec_path, spec, s, trigger_interval=trigger_interval)
    stop = threading.Event()
    alerts: list[tuple[str, str]] = []
    result: dict[str, Any] = {}

    def run_supervisor() -> None:
        try:
            result["report"] = supervise(
                spec,
                s,
                spec_path=spec_path,
                checks=10**9,
                interval_s=1.0,
                stall_after_s=stall_after_s,
                max_restarts=kills * 3 + 10,
                backoff_s=backoff_s,
                process=proc,
                stop=stop,
                bootstrap=bootstrap,
                on_alert=lambda k, m: alerts.append((k, m)),
            )
        except BaseException as e:  # noqa: BLE001 - surfaced by the caller
            result["error"] = e

    def recovered(pid_before: int | None, version_before: int, lines_before: int) -> bool:
        """A new process made a micro-batch and grew the output (or has nothing left to read)."""
        if proc.pid == pid_before or not proc.alive() or progress_lines(spec, s) <= lines_before:
            return False
        return delta_version(out_path) > version_before or drained()

    def drained() -> bool:
        return input_drained(spec, s, proc, bootstrap, stall_after_s)

    recover_s: list[float] = []
    killed: list[int] = []
    stopped: list[str] = []
    bounced = False
    t0 = time.monotonic()
    sup = threading.Thread(target=run_supervisor, name="supervisor", daemon=True)
    sup.start()
    try:
        # first micro-batch with output of the first process
        if not wait_until(
            lambda: proc.pid is not None and progress_lines(spec, s) > 0 and delta_version(out_path) >= 0,
            step_timeout_s,
        ):
            raise TimeoutError("the stream process produced no output")
        done_kills = 0
        while done_kills < kills:
            time.sleep(rng.uniform(0, 1.5))
            victim, v0, l0 = proc.pid, delta_version(out_path), progress_lines(spec, s)
            t_kill = time.monotonic()
            done_kills += 1
            if done_kills in stops_at:
                stopped.append(proc.stop())
                v0, l0 = delta_version(out_path), progress_lines(spec, s)  # its last batch's, written as it stopped
            else:
                proc.kill(signal.SIGKILL)
                if victim is not None:
                    killed.append(victim)
            if not wait_until(lambda victim=victim, v0=v0, l0=l0: recovered(victim, v0, l0), step_timeout_s):
                raise TimeoutError(f"no recovery within {step_timeout_s}s after kill {done_kills}")
            grew = delta_version(out_path) > v0
            if grew:
                recover_s.append(time.monotonic() - t_kill)
            log(
                f"kill {done_kills}: pid {victim} {'stopped' if done_kills in stops_at else 'SIGKILLed'}; "
                f"new pid {proc.pid}; "
                + (f"output grew {recover_s[-1]:.1f}s after the kill" if grew else "nothing left to read")
            )
            if broker is not None and broker_bounce_after == done_kills and not bounced:
                bounced = True
                v1, l1, pid1 = delta_version(out_path), progress_lines(spec, s), proc.pid
                log("broker: stop")
                broker.stop()
                time.sleep(3)
                broker.start()
                log("broker: started again")
                if not wait_until(
                    lambda l1=l1, v1=v1: (
                        progress_lines(spec, s) > l1 and proc.alive() and (delta_version(out_path) > v1 or drained())
                    ),
                    step_timeout_s,
                ):
                    raise TimeoutError("no recovery after the broker bounce")
                log(f"broker bounce survived (stream pid {pid1} -> {proc.pid})")
            if drained():
                log("input drained before all kills were done")
                break

        def settled() -> bool:
            lines = progress_lines(spec, s)
            if not drained():
                return False
            time.sleep(3)
            return progress_lines(spec, s) == lines and proc.alive()

        if not wait_until(settled, finish_timeout_s, step=0.5):
            raise TimeoutError("the stream did not drain")
    finally:
        stop.set()
        sup.join(60)
        result["final_stop"] = proc.stop()
        if broker is not None and not broker.is_running():
            broker.start()
    if "error" in result:
        raise result["error"]
    report = result.get("report")
    return {
        "kills": done_kills,
        "killed_pids": killed,
        "stopped": stopped,
        "final_stop": result.get("final_stop"),
        "restarts": len(report.restarts) - 1 if report else None,  # the first entry is the initial start
        "restart_reasons": [r["reason"].split(":")[0] for r in report.restarts] if report else [],
        "broker_bounced": bounced,
        "recover_s": recover_s,
        "alerts": len(alerts),
        "seconds": round(time.monotonic() - t0, 1),
        "report": report,
    }


def input_drained(spec, s: Settings, proc, bootstrap: str, stall_after_s: float = 240) -> bool:
    """The stream process ``proc`` is alive and has read everything Kafka holds (lag 0 on both streams)."""
    from jobs.operate.health import health

    if not proc.alive():
        return False
    h = health(spec, s, process=proc, bootstrap=bootstrap, stall_after_s=stall_after_s)
    return bool(h.lag) and all(v == 0 for v in h.lag.values())
