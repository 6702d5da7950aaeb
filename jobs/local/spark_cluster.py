"""A local Spark standalone cluster: one master and N workers on 127.0.0.1, from pyspark's own
``bin/spark-class`` (the pip package ships the launcher and every jar; no Spark download).

It proves the pipeline on a real cluster (``tests/integration/test_cluster.py``): the driver
connects to :attr:`SparkCluster.master_url` (``JOINSHIFT_SPARK_MASTER``), executors are separate
JVMs the workers launch, and they share this machine's file system with the driver, so a local
storage root works as a shared volume would on a real cluster.

Everything lives under ``root``: ``conf/`` (an empty ``SPARK_CONF_DIR``, so no spark-defaults
from elsewhere leak in), ``work/`` (the workers' work dirs: each executor's stdout/stderr) and
``logs/`` (``master.log``, ``worker-<i>.log``: the daemons' console). Ports are free ones.

Example::

    with SparkCluster(tmp / "spark", workers=2) as cluster:
        env = {"JOINSHIFT_SPARK_MASTER": cluster.master_url}
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from jobs.local.kafka_setup import LocalService, free_ports, tail, wait_exit

log = logging.getLogger("joinshift.spark")


class SparkClusterError(RuntimeError):
    """The local Spark cluster could not be started."""


def spark_home() -> Path:
    """The pip-installed pyspark package: a complete SPARK_HOME (``bin/``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster(LocalService):
    """A standalone master and ``workers`` workers (``cores`` each, ``memory`` for executors),
    started and stopped together; a context manager."""

    #: The daemons' JVM options: they schedule and heartbeat and run no task, so their JIT stops
    #: at C1; C2's compiles of their start-up code cost more CPU than they ever return (both up
    #: in 5.6 s instead of 12-21 s, half the CPU: BENCHMARKS). Executors keep the JVM's default.
    DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1"

    def __init__(
        self,
        root: str | Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = "256m",
    ) -> None:
        self.root = Path(root)
        self.workers, self.cores, self.memory, self.daemon_memory = workers, cores, memory, daemon_memory
        self.port, self.ui_port, *self.worker_ports = free_ports(2 + 2 * workers)
        self.log_dir = self.root / "logs"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        """What a driver's ``spark.master`` (``JOINSHIFT_SPARK_MASTER``) takes."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def status(self, timeout: float = 2) -> dict[str, Any]:
        """The master's state as its web UI serves it as JSON (``/json/``): status, alive workers,
        cores, active applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=timeout) as r:
            return json.loads(r.read())

    def start(self, timeout: float = 120, *, wait: bool = True) -> str:
        """Start the master, then the workers; return :attr:`master_url` once the master counts
        every worker alive (``wait=False``: at once; then :meth:`wait_ready` before using it)."""
        for d in ("conf", "work", "logs"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._spawn("master", "org.apache.spark.deploy.master.Master", ["--port", str(self.port)], self.ui_port)
        for i in range(self.workers):
            port, ui = self.worker_ports[2 * i], self.worker_ports[2 * i + 1]
            args = ["--port", str(port), "--cores", str(self.cores), "--memory", self.memory]
            args += ["--work-dir", str(self.root / "work"), self.master_url]
            self._spawn(f"worker-{i + 1}", "org.apache.spark.deploy.worker.Worker", args, ui)
        if wait:
            self.wait_ready(timeout)
        return self.master_url

    def wait_ready(self, timeout: float = 120) -> None:
        """Return once the master is ALIVE and counts every worker alive."""
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise self._failure(f"Spark {name} exited during start-up (exit {proc.returncode})", name)
            with contextlib.suppress(OSError, ValueError):
                st = self.status()
                if st.get("status") == "ALIVE" and int(st.get("aliveworkers", 0)) >= self.workers:
                    log.info(
                        "Spark cluster ready at %s (%d workers; logs in %s)",
                        self.master_url,
                        self.workers,
                        self.log_dir,
                    )
                    return
            if time.monotonic() > deadline:
                raise self._failure(f"the Spark master did not count {self.workers} alive workers in {timeout}s")
            time.sleep(0.5)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the workers (they stop their executors), then the master; SIGKILL what is
        still up after ``timeout``, each daemon's whole process group (executors included)."""
        workers = [n for n in self._procs if n != "master"]
        for group in (workers, ["master"] if "master" in self._procs else []):
            for name in group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._procs[name].pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for name in group:
                proc = self._procs[name]
                if not wait_exit(proc.pid, max(0.0, deadline - time.monotonic()), proc):
                    log.warning("Spark %s (pid %s) ignored SIGTERM for %ss; killing it", name, proc.pid, timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # executors a worker left behind
                wait_exit(proc.pid, 10, proc)
        self._procs.clear()
        log.info("Spark cluster stopped")

    # -- internals -------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        home = spark_home()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            SPARK_HOME=str(home),
            SPARK_CONF_DIR=str(self.root / "conf"),
            SPARK_LOCAL_IP="127.0.0.1",  # daemons and the executors they launch bind loopback only
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=self.DAEMON_JAVA_OPTS,
            SPARK_WORKER_DIR=str(self.root / "work"),
        )
        return env

    def _spawn(self, name: str, main_class: str, args: list[str], ui_port: int) -> None:
        cmd = [str(spark_home() / "bin" / "spark-class"), main_class, "--host", "127.0.0.1"]
        cmd += ["--webui-port", str(ui_port), *args]
        with (self.log_dir / f"{name}.log").open("ab") as out:
            out.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
            out.flush()
            self._procs[name] = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() takes the executors along
                close_fds=True,
            )
        log.info("Started Spark %s (pid %s)", name, self._procs[name].pid)

    def _failure(self, what: str, name: str = "master") -> SparkClusterError:
        path = self.log_dir / f"{name}.log"
        return SparkClusterError(f"{what}\n--- last lines of {path} ---\n{tail(path)}")
