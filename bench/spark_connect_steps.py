"""What a shared Spark saves: short ``joinshift`` steps as CLI processes, each starting its own
Spark driver JVM (the default) against the same steps as Spark Connect clients of one server
(``joinshift spark-server start``, ``JOINSHIFT_SPARK_REMOTE``).

One generated day goes to its own topics on an embedded broker; then, ``--repeat`` times, the
steps run as ``python -m jobs.cli <step>`` child processes, once per mode, each mode on its own
pipeline (own tables) reading the same topics, alternating classic / Connect so both see the
same machine load. Reported per step and mode: median wall time of the whole process (Python
start, Spark session, the work, exit), and the ratio classic ÷ Connect; the server's start-up
(paid once) is reported beside them.

    python -m bench.spark_connect_steps [--left-events 2000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.scratch import scratch_settings
from jobs.settings import PROJECT_ROOT, settings_env

DS, NEXT = "2026-11-19", "2026-11-20"
STEPS = [
    ["land", "--ds", DS, "--to", NEXT],
    ["batch", "--ds", DS],
    ["compare", "--ds", DS],
    ["quality", "run", "--ds", DS, "--kind", "raw_left"],  # + --dir: the bench's own suites
    ["recommend", "--ds", DS, "--json"],
]


def _step(argv: list[str], spec_file: str, env: dict[str, str], suites: Path) -> float:
    extra = ["--dir", str(suites)] if argv[0] == "quality" else []
    t = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "jobs.cli", *argv, "--spec", spec_file, *extra],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - t
    if res.returncode != 0 or res.stderr:
        raise SystemExit(f"{' '.join(argv)} failed (exit {res.returncode}):\n{res.stderr}")
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--left-events", type=int, default=2000, help="left events in the generated day (default 2000)")
    p.add_argument("--repeat", type=int, default=2, help="runs of every step per mode (default 2; medians)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--spec", default=str(PROJECT_ROOT / "include" / "specs" / "search_sessions.yaml"))
    p.add_argument("--root", default=str(PROJECT_ROOT / "var" / "bench" / "connect"), help="scratch folder (wiped)")
    args = p.parse_args(argv)
    command = "python -m bench.spark_connect_steps " + " ".join(argv if argv is not None else sys.argv[1:])

    from jobs.local.chaos import publish_workload
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.local.spark_connect import SparkConnectServer
    from jobs.quality.suites import write_suites
    from jobs.spec import load_spec, write_spec

    root = Path(args.root)
    s = scratch_settings(root, local_root=str(root / "local"), spark_remote="")
    base = load_spec(args.spec)
    specs: dict[str, str] = {}
    for mode in ("classic", "connect"):
        spec = base.model_copy(
            update={
                "pipeline": f"bench_{mode}",
                "left": base.left.model_copy(update={"topic": "bench_connect_left"}),
                "right": base.right.model_copy(update={"topic": "bench_connect_right"}),
            }
        )
        specs[mode] = str(write_spec(spec, root / f"{mode}.yaml"))
        write_suites(spec, str(root / "expectations"))
    broker = EmbeddedKafka(s)
    bootstrap = broker.start()
    server = SparkConnectServer(s, port=0, root=root / "spark-connect")
    times: dict[str, dict[str, list[float]]] = {m: {st[0]: [] for st in STEPS} for m in specs}
    try:
        n = publish_workload(base, load_spec(specs["classic"]), bootstrap, args.left_events, args.seed)
        t = time.monotonic()
        url = server.start()
        server_start = time.monotonic() - t
        env = {**os.environ, **settings_env(s), "JOINSHIFT_KAFKA_BOOTSTRAP": bootstrap, "PYTHONPATH": str(PROJECT_ROOT)}
        envs = {"classic": {**env, "JOINSHIFT_SPARK_REMOTE": ""}, "connect": {**env, "JOINSHIFT_SPARK_REMOTE": url}}
        print(f"{n:,} records published; Spark Connect server up in {server_start:.1f} s", file=sys.stderr)
        for i in range(args.repeat):
            for mode in ("classic", "connect"):
                for st in STEPS:
                    took = _step(st, specs[mode], envs[mode], root / "expectations")
                    times[mode][st[0]].append(took)
                    print(f"[{i + 1}/{args.repeat}] {mode:7} {st[0]:9} {took:6.1f} s", file=sys.stderr, flush=True)
    finally:
        server.stop()
        broker.stop()
    med = {m: {k: statistics.median(v) for k, v in by.items()} for m, by in times.items()}
    steps = [
        {
            "step": st[0],
            "classic_s": round(med["classic"][st[0]], 2),
            "connect_s": round(med["connect"][st[0]], 2),
            "ratio": round(med["classic"][st[0]] / med["connect"][st[0]], 2),
        }
        for st in STEPS
    ]
    total = {m: sum(med[m].values()) for m in med}
    print(
        json.dumps(
            {
                "command": command,
                "left_events": args.left_events,
                "records": n,
                "repeat": args.repeat,
                "server_start_s": round(server_start, 1),
                "steps": steps,
                "all_steps_classic_s": round(total["classic"], 1),
                "all_steps_connect_s": round(total["connect"], 1),
                "ratio": round(total["classic"] / total["connect"], 2),
                "load_avg_1m": round(os.getloadavg()[0], 1),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
