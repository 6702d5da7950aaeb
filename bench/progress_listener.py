"""What one micro-batch's progress event costs the driver: the progress log's listener
(``jobs.storage.progress.ProgressRecorder``: the event's progress as JSON text, two calls into
the JVM) against pyspark's own listener, which first builds the whole event object
(``StreamingQueryProgress.fromJObject``, then its JSON), on the same events.

The events are real: the product's streaming join (Kafka sources, join and de-duplication state)
runs a generated day in small micro-batches, and its progress objects are kept in the JVM. Each
round handles every event both ways, alternately; reported per event: wall time, this Python
process's CPU and the driver JVM's CPU, medians over the rounds.

    python -m bench.progress_listener [--left-events 2000] [--max-offsets 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil

from bench.scratch import default_spec, publish_one_day, scratch_settings
from jobs.settings import PROJECT_ROOT


def _cpu_s(proc: psutil.Process) -> float:
    """The process's user + system CPU seconds."""
    t = proc.cpu_times()
    return t.user + t.system


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.progress_listener", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=2000, help="left events in the one generated day")
    p.add_argument("--max-offsets", type=int, default=200, help="maxOffsetsPerTrigger per topic (small batches)")
    p.add_argument("--rounds", type=int, default=5, help="rounds over every event, each way")
    scratch = PROJECT_ROOT / "var" / "bench-progress-listener"
    p.add_argument("--root", default=str(scratch), help="scratch folder (wiped)")
    args = p.parse_args(argv)

    from pyspark.sql.streaming.listener import StreamingQueryProgress

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.steps.stream import start_streaming_join
    from jobs.storage.progress import ProgressRecorder
    from jobs.storage.spark import get_spark

    root = Path(args.root)
    s = scratch_settings(root)
    spec = default_spec(args.max_offsets)
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    try:
        publish_one_day(spec, bootstrap, args.left_events)
        spark = get_spark("joinshift-bench-progress-listener", s)
        jvm = psutil.Process(int(spark.sparkContext._jvm.ProcessHandle.current().pid()))  # type: ignore[union-attr]
        (q,) = start_streaming_join(spark, spec, bootstrap=bootstrap, s=s, available_now=True, quarantine=False)
        q.awaitTermination()
        events = [SimpleNamespace(progress=lambda jp=jp: jp) for jp in q._jsq.recentProgress()]
        recorder = ProgressRecorder()  # routes no query: it reads each event's name and stops there

        def pyspark_listener(event):  # what pyspark's listener wrapper does before calling ours
            return StreamingQueryProgress.fromJObject(event.progress()).json

        ways = {"joinshift's recorder": recorder.onQueryProgress, "pyspark's listener": pyspark_listener}
        per_event: dict[str, dict[str, list[float]]] = {w: {"wall": [], "py": [], "jvm": []} for w in ways}
        for _ in range(args.rounds):
            for way, handle in ways.items():
                w0, p0, j0 = time.perf_counter(), time.process_time(), _cpu_s(jvm)
                for e in events:
                    handle(e)
                n = len(events)
                per_event[way]["wall"].append((time.perf_counter() - w0) / n)
                per_event[way]["py"].append((time.process_time() - p0) / n)
                per_event[way]["jvm"].append((_cpu_s(jvm) - j0) / n)
        spark.stop()
    finally:
        broker.stop()
    med = {w: {k: statistics.median(v) * 1000 for k, v in d.items()} for w, d in per_event.items()}
    print(f"{len(events)} progress events of the product's streaming join, {args.rounds} rounds each way")
    print("| listener | wall per event | Python CPU | driver JVM CPU |")
    print("|---|---|---|---|")
    for way, m in med.items():
        print(f"| {way} | {m['wall']:.2f} ms | {m['py']:.2f} ms | {m['jvm']:.2f} ms |")
    ours, theirs = med["joinshift's recorder"], med["pyspark's listener"]
    print(
        json.dumps(
            {
                "wall_ratio": round(ours["wall"] / theirs["wall"], 3),
                "cpu_ratio": round((ours["py"] + ours["jvm"]) / (theirs["py"] + theirs["jvm"]), 3),
                "command": "python -m bench.progress_listener " + " ".join(argv or sys.argv[1:]),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
