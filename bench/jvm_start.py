"""What a fresh joinshift process pays before its first useful work, with and without set-up's
class-data archive (``jobs.storage.class_archive``): the driver JVM's start (``get_spark``), its
first Spark job, and its first Delta write, in fresh processes taking turns, in one run.

    python -m bench.jvm_start [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, os, sys, time
t0 = time.monotonic()
from jobs.settings import settings
from jobs.storage.spark import driver_java_options, get_spark
s = settings()
extra = {"spark.driver.extraJavaOptions": driver_java_options(s, use_archive=sys.argv[1] == "archive")}
spark = get_spark("bench-jvm-start", s, extra)
t1 = time.monotonic()
spark.range(100).count()
t2 = time.monotonic()
spark.range(100).write.format("delta").save(os.path.join(s.storage_root, "t"))
t3 = time.monotonic()
print(json.dumps({"session": t1 - t0, "first_job": t2 - t1, "first_delta_write": t3 - t2, "total": t3 - t0}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jvm_start", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="fresh processes per setting (they take turns)")
    args = p.parse_args(argv)

    from jobs.settings import settings
    from jobs.storage.spark import class_archive

    if not class_archive(settings()).exists():
        print("no class archive: run `python -m jobs.storage.class_archive` (set-up does) first", file=sys.stderr)
        return 1
    times: dict[str, list[dict]] = {"archive": [], "none": []}
    for i in range(args.runs):
        for kind in times:
            with tempfile.TemporaryDirectory() as root:
                env = {"JOINSHIFT_STORAGE_ROOT": root, "JOINSHIFT_LOG_DIR": root, "JOINSHIFT_SPARK_REMOTE": ""}
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, kind],
                    env={**os.environ, **env},
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            times[kind].append(json.loads(out.strip().splitlines()[-1]))
            print(f"run {i + 1} {kind:8s} {times[kind][-1]['total']:.1f} s", flush=True)
    keys = ("session", "first_job", "first_delta_write", "total")
    med = {k: {m: statistics.median(t[m] for t in v) for m in keys} for k, v in times.items()}
    print("| class archive | driver start | first job | first Delta write | total |")
    print("|---|---|---|---|---|")
    for kind, m in med.items():
        print(f"| {kind} | " + " | ".join(f"{m[k]:.1f} s" for k in keys) + " |")
    print(f"total, none / archive: {med['none']['total'] / med['archive']['total']:.2f}x (median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
