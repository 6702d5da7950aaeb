"""Chaos for the supervised streaming join: SIGKILL the stream process at random moments (and
optionally bounce the Kafka broker), let :func:`jobs.supervisor.supervise` restart it from its
checkpoint, and check the Delta output equals one uninterrupted ``availableNow`` run exactly.

Every kill lands shortly after the restarted process's first output commit (the output Delta
table's version grew) plus a seeded random 0-1.5 s: i.e. during the progress/offset commit or
the next micro-batch (mid foreachBatch, mid Delta commit). Measured per kill: seconds from the
SIGKILL to the output Delta table's next new version (the first new output rows after the
automatic restart).

    python -m bench.chaos --kills 20 [--left-events 1000] [--max-offsets 40] [--seed 2026]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jobs.settings import PROJECT_ROOT, Settings, settings


def isolated_spec(spec, name: str, max_offsets: int):
    """Own topics, tables and checkpoints; watermarks as wide as the validity window, so no record
    is late and the output cannot depend on how the backlog is cut into micro-batches."""
    side = lambda st, tag: st.model_copy(update={"topic": f"{name}_{tag}", "watermark_delay": spec.timestamp_validity.max_past})  # noqa: E731
    return spec.model_copy(update={
        "pipeline": name, "left": side(spec.left, "left"), "right": side(spec.right, "right"),
        "streaming": spec.streaming.model_copy(update={"max_offsets_per_trigger": max_offsets}),
    })


def publish_workload(base_spec, spec, bootstrap: str, left_events: int, seed: int) -> int:
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    wl = generate(WorkloadParams(left_events_per_day=left_events, days=1, seed=seed), base_spec)
    records = wl.records.assign(topic=wl.records.topic.map({base_spec.left.topic: spec.left.topic,
                                                            base_spec.right.topic: spec.right.topic}))
    for st in (spec.left, spec.right):
        create_topic(bootstrap, st.topic)
    publish(records, bootstrap)
    return len(records)


def reference_output(spark, spec, bootstrap: str, s: Settings) -> list[tuple]:
    """One uninterrupted availableNow run, in-process (its spec may cut micro-batches differently:
    with wide watermarks the output does not depend on it)."""
    from jobs.steps.stream import start_streaming_join

    (q,) = start_streaming_join(spark, spec, bootstrap=bootstrap, s=s, available_now=True, quarantine=False)
    q.awaitTermination()
    return output_rows(spark, spec, s)


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


def _wait(cond, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def chaos_run(spec, spec_path: str | Path, s: Settings, bootstrap: str, *, kills: int, seed: int,
              broker=None, broker_bounce_after: int | None = None, trigger_interval: str = "1 second",
              stall_after_s: float = 240, step_timeout_s: float = 360, finish_timeout_s: float = 300,
              backoff_s=(0.5, 1, 2, 4, 8), log=print) -> dict[str, Any]:
    """Supervise the stream process of ``spec`` (settings ``s``) and SIGKILL it ``kills`` times;
    bounce ``broker`` (stop, start: same port and data) after kill ``broker_bounce_after``; then
    let it drain (lag 0 on both streams, no new micro-batch for a few seconds) and stop it."""
    from jobs.operate.process import StreamProcess
    from jobs.operate.health import health
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
            result["report"] = supervise(spec, s, spec_path=spec_path, checks=10**9, interval_s=1.0,
                                         stall_after_s=stall_after_s, max_restarts=kills * 3 + 10,
                                         backoff_s=backoff_s, process=proc, stop=stop, bootstrap=bootstrap,
                                         on_alert=lambda k, m: alerts.append((k, m)))
        except BaseException as e:  # surfaced by the caller
            result["error"] = e

    def recovered(pid_before: int | None, version_before: int, lines_before: int) -> bool:
        """A new process made a micro-batch and grew the output (or has nothing left to read)."""
        if proc.pid == pid_before or not proc.alive() or progress_lines(spec, s) <= lines_before:
            return False
        if delta_version(out_path) > version_before:
            return True
        h = health(spec, s, process=proc, bootstrap=bootstrap, stall_after_s=stall_after_s)
        return all(v == 0 for v in h.lag.values()) and bool(h.lag)

    def drained() -> bool:
        return _drained_fn(spec, s, proc, bootstrap, stall_after_s)

    recover_s: list[float] = []
    bounced = False
    t0 = time.monotonic()
    sup = threading.Thread(target=run_supervisor, name="supervisor", daemon=True)
    sup.start()
    try:
        # first micro-batch with output of the first process
        if not _wait(lambda: proc.pid is not None and progress_lines(spec, s) > 0 and delta_version(out_path) >= 0,
                     step_timeout_s):
            raise TimeoutError("the stream process produced no output")
        done_kills = 0
        while done_kills < kills:
            time.sleep(rng.uniform(0, 1.5))
            victim, v0, l0 = proc.pid, delta_version(out_path), progress_lines(spec, s)
            t_kill = time.monotonic()
            proc.kill(signal.SIGKILL)
            done_kills += 1
            if not _wait(lambda: recovered(victim, v0, l0), step_timeout_s):
                raise TimeoutError(f"no recovery within {step_timeout_s}s after kill {done_kills}")
            grew = delta_version(out_path) > v0
            if grew:
                recover_s.append(time.monotonic() - t_kill)
            log(f"kill {done_kills}: pid {victim} SIGKILLed; new pid {proc.pid}; "
                + (f"output grew {recover_s[-1]:.1f}s after the kill" if grew else "nothing left to read"))
            if broker is not None and broker_bounce_after == done_kills and not bounced:
                bounced = True
                v1, l1, pid1 = delta_version(out_path), progress_lines(spec, s), proc.pid
                log("broker: stop")
                broker.stop()
                time.sleep(3)
                broker.start()
                log("broker: started again")
                if not _wait(lambda: progress_lines(spec, s) > l1 and proc.alive()
                             and (delta_version(out_path) > v1 or drained()), step_timeout_s):
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

        if not _wait(settled, finish_timeout_s, step=0.5):
            raise TimeoutError("the stream did not drain")
    finally:
        stop.set()
        sup.join(60)
        proc.stop()
        if broker is not None and not broker.is_running():
            broker.start()
    if "error" in result:
        raise result["error"]
    report = result.get("report")
    return {
        "kills": done_kills,
        "restarts": len(report.restarts) - 1 if report else None,  # the first entry is the initial start
        "restart_reasons": [r["reason"].split(":")[0] for r in report.restarts] if report else [],
        "broker_bounced": bounced,
        "recover_s": recover_s,
        "alerts": len(alerts),
        "seconds": round(time.monotonic() - t0, 1),
        "report": report,
    }


def _drained_fn(spec, s, proc, bootstrap, stall_after_s) -> bool:
    from jobs.operate.health import health

    if not proc.alive():
        return False
    h = health(spec, s, process=proc, bootstrap=bootstrap, stall_after_s=stall_after_s)
    return bool(h.lag) and all(v == 0 for v in h.lag.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--left-events", type=int, default=1000, help="left events (one day): enough input for 20 kills")
    p.add_argument("--max-offsets", type=int, default=40, help="maxOffsetsPerTrigger")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--no-broker-bounce", action="store_true")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench" / "chaos"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    command = "python -m bench.chaos " + " ".join(argv if argv is not None else sys.argv[1:])

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.storage.spark import get_spark
    from jobs.spec import load_spec
    from jobs.spec import write_spec

    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    base_s = dataclasses.replace(settings(), kafka_home=str(root / "kafka"), log_dir=str(root / "logs"),
                                 spark_driver_memory="1g", kafka_bootstrap="")
    ref_s = dataclasses.replace(base_s, storage_root=str(root / "reference"))
    run_s = dataclasses.replace(base_s, storage_root=str(root / "supervised"))
    base = load_spec(PROJECT_ROOT / "include" / "specs" / "search_sessions.yaml")
    spec = isolated_spec(base, "chaos_bench", args.max_offsets)
    spec_path = write_spec(spec, root / "chaos_bench.yaml")
    broker = EmbeddedKafka(base_s)
    bootstrap = broker.start()
    spark = None
    try:
        n = publish_workload(base, spec, bootstrap, args.left_events, args.seed)
        spark = get_spark("joinshift-chaos-bench", ref_s, extra_conf={"spark.sql.shuffle.partitions": "2"})
        t = time.monotonic()
        expected = reference_output(spark, isolated_spec(base, "chaos_bench", None), bootstrap, ref_s)
        ref_seconds = time.monotonic() - t
        res = chaos_run(spec, spec_path, run_s, bootstrap, kills=args.kills, seed=args.seed,
                        broker=None if args.no_broker_bounce else broker,
                        broker_bounce_after=None if args.no_broker_bounce else max(1, args.kills // 2))
        got = output_rows(spark, spec, run_s)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    rec = res["recover_s"]
    summary = {
        "command": command,
        "records": n,
        "reference_rows": len(expected), "reference_seconds": round(ref_seconds, 1),
        "kills": res["kills"], "restarts": res["restarts"], "broker_bounced": res["broker_bounced"],
        "output_rows": len(got), "duplicates": len(got) - len(set(got)),
        "output_equal": got == expected,
        "kill_to_new_output_s": {"n": len(rec), "mean": round(statistics.mean(rec), 1) if rec else None,
                                 "median": round(statistics.median(rec), 1) if rec else None,
                                 "max": round(max(rec), 1) if rec else None},
        "chaos_seconds": res["seconds"],
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["output_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
