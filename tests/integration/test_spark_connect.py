"""One Spark for many steps: the short CLI steps as Spark Connect clients of the local server
(``jobs/local/spark_connect.py``), on the real broker, Spark and Delta.

The server starts with the test settings; ``land``, ``batch`` and ``compare`` then run as child
processes with ``JOINSHIFT_SPARK_REMOTE`` set, on one pipeline, and in this process on a driver of
its own (the ``spark`` fixture) on a twin pipeline reading the same topics. Their printed results
and every table they wrote must be equal; no child may start a JVM (no ``java`` process below it
while it runs, watched with psutil) and none may print anything on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from jobs.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DS = "2026-11-19"
#: Short steps on one ds, the spec's baseline only (each step costs ~10-30 s of Spark jobs here).
STEPS = [
    ["land", "--ds", DS],
    ["batch", "--ds", DS, "--variant", "batch_1d_windowed"],
    ["compare", "--ds", DS],
]


@pytest.fixture(scope="module")
def twin_specs(kafka, demo_spec, own_pipeline_spec, tmp_path_factory):
    """Two pipelines over the same small generated day: ``connect_remote`` for the Connect
    clients, ``connect_local`` for this process's driver. Returns their spec files."""
    from jobs.spec import write_spec
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    remote = own_pipeline_spec("connect_remote")
    local = remote.model_copy(update={"pipeline": "connect_local"})
    wl = generate(WorkloadParams(left_events_per_day=300, days=1, seed=5), demo_spec)
    records = wl.records.assign(
        topic=wl.records.topic.map({demo_spec.left.topic: remote.left.topic, demo_spec.right.topic: remote.right.topic})
    )
    for st in (remote.left, remote.right):
        create_topic(kafka, st.topic)
    publish(records, kafka)
    folder = tmp_path_factory.mktemp("connect")
    return {
        "remote": (remote, str(write_spec(remote, folder / "remote.yaml"))),
        "local": (local, str(write_spec(local, folder / "local.yaml"))),
    }


@pytest.fixture(scope="module")
def server(test_settings, test_root):
    from jobs.local.spark_connect import SparkConnectServer

    with SparkConnectServer(test_settings, port=0, root=test_root / "spark-connect") as srv:
        yield srv


class Watched:
    """``python argv`` started now, and the names of every process seen below it while it runs
    (polled every 20 ms from a thread: a JVM takes seconds to start, it cannot hide)."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, *argv], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.below: set[str] = set()
        self._watch = threading.Thread(target=self._poll, daemon=True)
        self._watch.start()

    def _poll(self) -> None:
        parent = psutil.Process(self.proc.pid)
        while self.proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                self.below.update(c.name() for c in parent.children(recursive=True))
            time.sleep(0.02)

    def wait(self) -> tuple[subprocess.CompletedProcess, set[str]]:
        out, err = self.proc.communicate(timeout=300)
        self._watch.join()
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err), self.below


def _tables(spark, spec, test_settings) -> dict[str, list[tuple]]:
    """The landed and joined tables, as sorted rows without the pipeline's name and write times
    (quarantine and match metrics: their counts and rates are in what land and compare print)."""
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, test_settings)
    paths = {
        "landed_left": tables.landed("left"),
        "landed_right": tables.landed("right"),
        "batch_1d_windowed": tables.output("batch_1d_windowed"),
    }
    out = {}
    for name, path in paths.items():
        df = spark.read.format("delta").load(path)
        keep = [c for c in df.columns if not c.endswith("_at") and c not in ("pipeline", "computed", "topic")]
        out[name] = sorted(tuple(str(v) for v in r) for r in df.select(*keep).collect())
    return out


def test_short_steps_over_spark_connect_equal_a_local_driver_and_start_no_jvm(
    spark, server, twin_specs, test_settings, capsys
):
    remote, remote_file = twin_specs["remote"]
    local, local_file = twin_specs["local"]
    env = {**os.environ, "JOINSHIFT_SPARK_REMOTE": server.url, "PYTHONPATH": str(ROOT)}

    printed: dict[str, list[str]] = {"remote": [], "local": []}
    for step in STEPS:  # each step on both at once: the server and this process's driver
        child = Watched(["-m", "jobs.cli", step[0], "--spec", remote_file, *step[1:]], env)
        capsys.readouterr()
        assert main([step[0], "--spec", local_file, *step[1:]]) == 0
        printed["local"].append(capsys.readouterr().out.replace("connect_local", "PIPELINE"))

        res, below = child.wait()
        assert res.returncode == 0, res.stderr
        assert res.stderr == "", f"{step[0]} over Connect printed on stderr:\n{res.stderr}"
        assert "java" not in below, f"{step[0]} started a JVM of its own: {below}"
        printed["remote"].append(res.stdout.replace("connect_remote", "PIPELINE"))

    assert printed["remote"] == printed["local"]  # land's counts, batch's rows, compare's table
    landed = [json.loads(line) for line in printed["remote"][0].splitlines()]
    assert sum(r["left"]["landed"] for r in landed) > 250  # the day's left events arrived
    assert _tables(spark, remote, test_settings) == _tables(spark, local, test_settings)

    # an Airflow task (joinshift_compare's first) in a worker whose environment has the variable
    task = f"from jobs import airflow_tasks; print(airflow_tasks.pending_compare_days({remote_file!r}))"
    res, below = Watched(["-c", task], env).wait()
    assert res.returncode == 0 and res.stderr == "" and "java" not in below, (res.stderr, below)
    assert res.stdout.strip() == f"['{DS}']"  # compared, but not every variant yet


def test_spark_server_status_and_a_taken_port_in_one_line(server, test_root):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOINSHIFT_LOCAL_ROOT": str(test_root / "other-local")}

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jobs.cli", "spark-server", *args],
            env={**env, **extra},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    # another process finds the server by its folder (<local_root>/spark-connect)
    status = json.loads(cli("status", JOINSHIFT_LOCAL_ROOT=str(server.root.parent)).stdout)
    assert status["running"] and status["accepting"] and status["url"] == server.url
    assert status["pid"] == server.status()["pid"] > 0

    taken = cli("start", "--port", str(server.port))
    assert taken.returncode == 1 and taken.stdout == ""
    line = taken.stderr.strip()
    assert line.startswith(f"joinshift spark-server: port {server.port} on 127.0.0.1 is taken") and "\n" not in line
    assert "--port N" in line and "JOINSHIFT_SPARK_REMOTE" in line
