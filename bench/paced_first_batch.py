"""A paced stream's first micro-batch in a fresh process: how long it takes and the Python
processes it starts (issue #13; what a restart of the paced engine waits for before its first
output).

One workload (``--left-events`` of one day) for the paced chaos test's spec
(:func:`jobs.local.chaos.paced_corrections_spec`: 30 records a stream and micro-batch, late
corrections on) is published once to a scratch broker. Then, ``--rounds`` times, each variant
runs in its own fresh process (variants alternate): a new driver, the stream from an empty
checkpoint as ``availableNow`` until the topics are read, its Python processes sampled every 0.1 s
(``psutil``: each one's start and CPU seconds). Variants:

* ``product``: the session as every joinshift step makes it;
* ``simplified-traceback``: the same with ``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled``
  back at Spark's default (true). Spark then pools the source's readers and the operator's
  workers apart, by that one environment variable.

Also timed: importing the modules the paced engine's Python processes load
(``jobs.storage.aligned_source``, ``jobs.join.paced_operator``), in a fresh interpreter, median of 3.

    python -m bench.paced_first_batch [--rounds 2] [--left-events 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.scratch import default_spec, scratch_settings
from jobs.settings import PROJECT_ROOT

VARIANTS: dict[str, dict[str, str]] = {
    "product": {},
    "simplified-traceback": {"spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "true"},
}
WORKER_MODULES = ("jobs.storage.aligned_source", "jobs.join.paced_operator")


def child(variant: str, root: Path, bootstrap: str, tag: str) -> dict[str, Any]:
    """In a fresh process: one availableNow run of the paced stream, its Python processes sampled."""
    import psutil

    from jobs.local.chaos import paced_corrections_spec, reference_output
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.spark import get_spark
    from jobs.storage.tables import Tables

    s = scratch_settings(root / tag)
    spec = paced_corrections_spec(default_spec(), "paced_first_batch").model_copy(
        update={"pipeline": f"paced_first_batch_{tag.replace('-', '_')}"}
    )
    t = time.monotonic()
    spark = get_spark("joinshift-bench-paced-first-batch", s, extra_conf=VARIANTS[variant])
    session_s = time.monotonic() - t
    me, seen, stop = psutil.Process(), {}, threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for p in me.children(recursive=True):
                try:
                    if "python" in p.name():
                        cpu = p.cpu_times()
                        seen[p.pid] = (p.create_time(), cpu.user + cpu.system, " ".join(p.cmdline()[1:4]))
                except psutil.Error:
                    pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0, wall0 = time.monotonic(), time.time()
    rows = reference_output(spark, spec, bootstrap, s)
    query_s = time.monotonic() - t0
    stop.set()
    sampler.join()
    batches = read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    first = batches[0]["durationMs"]
    spark.stop()
    return {
        "variant": variant,
        "session_s": round(session_s, 1),
        "first_batch_ms": {k: first[k] for k in ("triggerExecution", "queryPlanning", "addBatch") if k in first},
        "query_s": round(query_s, 1),
        "batches": len(batches),
        "rows": len(rows),
        "python_processes": [
            {"started_s": round(born - wall0, 1), "cpu_s": round(cpu, 2), "module": cmd}
            for born, cpu, cmd in sorted(seen.values())
        ],
    }


def import_seconds(module: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=PROJECT_ROOT)
        times.append(time.monotonic() - t)
    return round(statistics.median(times), 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.paced_first_batch", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="fresh processes per variant (alternating)")
    p.add_argument("--left-events", type=int, default=300, help="left events of the one published day")
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench-paced-first-batch"), help="scratch (wiped)")
    p.add_argument("--out", default=str(PROJECT_ROOT / "var" / "bench-results" / "paced_first_batch.json"))
    p.add_argument("--child", nargs=3, metavar=("VARIANT", "BOOTSTRAP", "TAG"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    root = Path(args.root)
    if args.child:
        variant, bootstrap, tag = args.child
        print(json.dumps(child(variant, root, bootstrap, tag)))
        return 0
    command = shlex.join(["python", "-m", "bench.paced_first_batch", *(sys.argv[1:] if argv is None else argv)])

    from jobs.local.chaos import paced_corrections_spec, publish_workload
    from jobs.local.kafka_broker import EmbeddedKafka

    shutil.rmtree(root, ignore_errors=True)
    s = scratch_settings(root / "broker")
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    runs: list[dict[str, Any]] = []
    try:
        base = default_spec()
        records = publish_workload(
            base, paced_corrections_spec(base, "paced_first_batch"), bootstrap, args.left_events, seed=11
        )
        print(f"{records} records published to {bootstrap}", flush=True)
        for r in range(args.rounds):
            for variant in VARIANTS:
                out = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.paced_first_batch",
                        "--root",
                        str(root),
                        "--child",
                        variant,
                        bootstrap,
                    ]
                    + [f"{variant}-{r}"],
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=PROJECT_ROOT,
                    env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                )
                run = json.loads(out.stdout.strip().splitlines()[-1])
                runs.append(run)
                cpu = sum(x["cpu_s"] for x in run["python_processes"])
                print(
                    f"round {r} {variant}: first micro-batch {run['first_batch_ms']['triggerExecution'] / 1000:.1f}s "
                    f"{run['first_batch_ms']}; {len(run['python_processes'])} Python processes, {cpu:.1f}s CPU; "
                    f"{run['batches']} micro-batches in {run['query_s']}s",
                    flush=True,
                )
    finally:
        broker.stop()

    def median(variant: str, f) -> float:
        return round(statistics.median(f(x) for x in runs if x["variant"] == variant), 2)

    summary = {
        variant: {
            "first_batch_s": median(variant, lambda x: x["first_batch_ms"]["triggerExecution"] / 1000),
            "python_processes": median(variant, lambda x: len(x["python_processes"])),
            "python_cpu_s": median(variant, lambda x: sum(y["cpu_s"] for y in x["python_processes"])),
            "query_s": median(variant, lambda x: x["query_s"]),
        }
        for variant in VARIANTS
    }
    imports = {m: import_seconds(m) for m in WORKER_MODULES}
    result = {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "records": records,
        "summary": summary,
        "import_s": imports,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"summary": summary, "import_s": imports}, indent=2))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
