"""A local Spark Connect server: one Spark driver JVM that many short ``joinshift`` steps share.

Every CLI step and Airflow task process otherwise starts its own driver JVM (seconds with ~50
connector jars on 2 cores). With ``JOINSHIFT_SPARK_REMOTE=sc://127.0.0.1:<port>`` set, the short
steps are Spark Connect clients of this server instead (``jobs.storage.spark.get_spark``) and
start no JVM. It is pyspark's own ``SparkConnectServer`` (``jars/spark-connect_2.13-*.jar``),
run by pyspark's ``bin/spark-submit`` with the same jars and settings a joinshift driver starts
with (``jobs.storage.spark.session_conf``): Delta, the Kafka connector, RocksDB state, quiet logs.

Where things live: ``<local_root>/spark-connect/`` holds ``state.json`` (pid, port, url: another
process's ``stop`` and ``status`` find the server by it) and ``conf/`` (an empty
``SPARK_CONF_DIR``, so no spark-defaults from elsewhere leak in); the server logs to
``<log_dir>/spark-connect.log`` (its console before logging is up: ``spark-connect.out``).
It listens on 127.0.0.1 only: on :attr:`SparkConnectServer.port`, the port ``spark_remote``
names when that is a loopback URL, else Spark Connect's default 15002 (``port=0``: a free one).

In production, point ``JOINSHIFT_SPARK_REMOTE`` at a Connect server of your own, started with
the same jars and settings (README, "One Spark for many steps").

CLI: ``joinshift spark-server {start,stop,status}``.

Example::

    with SparkConnectServer(s, port=0) as server:
        env = {"JOINSHIFT_SPARK_REMOTE": server.url}
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jobs.local.kafka_setup import (
    LocalService,
    ServiceState,
    free_ports,
    port_accepts,
    port_is_free,
    tail,
    terminate,
)
from jobs.local.spark_cluster import spark_home
from jobs.settings import PROJECT_ROOT, Settings, settings, settings_env
from jobs.storage.processes import cmdline, pid_alive
from jobs.storage.spark import session_conf

log = logging.getLogger("joinshift.spark")

#: Spark Connect's own default port (``spark.connect.grpc.binding.port``).
DEFAULT_PORT = 15002
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class SparkConnectError(RuntimeError):
    """The local Spark Connect server could not be started, reached or stopped."""


def configured_port(remote: str) -> int | None:
    """The port of a loopback ``sc://`` URL (what this machine's server should listen on), else None."""
    if not remote:
        return None
    parts = urlsplit(remote)
    if parts.hostname not in _LOOPBACK:
        return None
    return parts.port or DEFAULT_PORT


class SparkConnectServer(LocalService):
    """The project-local Connect server described by ``Settings``; a context manager. Its state
    is on disk, so ``start`` in one process and ``stop`` or ``status`` in another work together."""

    def __init__(self, s: Settings | None = None, *, port: int | None = None, root: str | Path | None = None):
        self.settings = s if s is not None else settings()
        self.root = Path(root) if root is not None else self.settings.local_path("spark-connect")
        self._state = ServiceState(self.root, SparkConnectError)
        self.state_file = self._state.file
        self.log_dir = Path(self.settings.log_dir)
        self.log_file = self.log_dir / "spark-connect.log"
        self.out_file = self.log_dir / "spark-connect.out"
        self._port = port
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public API ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port it listens on (running), else the one it will take."""
        recorded = self._state.read().get("port") if self._pid() is not None else None
        if isinstance(recorded, int):
            return recorded
        if self._port is None:
            self._port = configured_port(self.settings.spark_remote) or DEFAULT_PORT
        elif self._port == 0:
            self._port = free_ports(1)[0]
        return self._port

    @property
    def url(self) -> str:
        """What ``JOINSHIFT_SPARK_REMOTE`` takes."""
        return f"sc://127.0.0.1:{self.port}"

    def is_running(self) -> bool:
        return self._pid() is not None

    def start(self, timeout: float = 120) -> str:
        """Start the server unless it runs already; return :attr:`url` once it accepts clients.
        Detached (its own session): it outlives this process until ``stop``."""
        with self._state.lock():
            pid = self._pid()
            if pid is not None:
                url = self.url
                log.info("Spark Connect server already running (pid %s) at %s", pid, url)
                self._wait_ready(pid, timeout)
                return url
            port = self.port
            if not port_is_free(port):
                raise SparkConnectError(
                    f"port {port} on 127.0.0.1 is taken by another process: stop it (see `ss -ltnp`) or "
                    f"use another, `joinshift spark-server start --port N` with JOINSHIFT_SPARK_REMOTE=sc://127.0.0.1:N"
                )
            return self._spawn(port, timeout)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the server's process group (Spark stops its sessions and state stores), SIGKILL
        what is still up after ``timeout``."""
        with self._state.lock():
            pid = self._pid()
            if pid is None:
                log.info("Spark Connect server in %s is not running", self.root)
                return
            terminate(pid, timeout, self._proc, "Spark Connect server", group=True)
            self._state.mark_stopped()
            log.info("Spark Connect server stopped")

    def status(self) -> dict[str, Any]:
        """Whether it runs, where, and what to set for the steps to use it (plain JSON data)."""
        pid = self._pid()
        state = self._state.read()
        return {
            "running": pid is not None,
            "pid": pid,
            "url": self.url if pid is not None else None,
            "accepting": pid is not None and port_accepts(self.port),
            "started_at": state.get("started_at") if pid is not None else None,
            "spark_remote": self.settings.spark_remote or None,
            "log_file": str(self.log_file),
            "state_file": str(self.state_file),
        }

    # -- internals -------------------------------------------------------------------

    def _pid(self) -> int | None:
        """The recorded pid, if that process is still our server (pids get reused)."""
        pid = self._state.read().get("pid")
        if not isinstance(pid, int) or not pid_alive(pid):
            return None
        cmd = cmdline(pid)
        if cmd and (SERVER_CLASS not in cmd or str(self.root) not in cmd):
            return None
        return pid

    def command(self, port: int) -> list[str]:
        """``spark-submit`` of the Connect server with a joinshift driver's settings on ``port``."""
        conf = {
            # its clients run the steps that run to their end (a streaming step starts a driver of its own)
            **session_conf(self.settings, log_name="spark-connect", throughput=True),
            "spark.app.name": "joinshift-spark-connect",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            # marks the server's own command line with its folder (how _pid knows it is ours)
            "spark.local.dir": str(self.root / "tmp"),
        }
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        return [*cmd, "spark-internal"]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(settings_env(self.settings))
        env["JOINSHIFT_SPARK_REMOTE"] = ""  # the server is a driver: its Python workers too
        path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(self.root / "conf"),
            SPARK_LOCAL_IP="127.0.0.1",
            # server-side Python (UDFs, foreachBatch) runs this interpreter and imports `jobs`
            PYSPARK_PYTHON=sys.executable,
            PYTHONPATH=path,
        )
        return env

    def _spawn(self, port: int, timeout: float) -> str:
        for d in ("conf", "tmp"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.out_file.open("ab") as out:
            out.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting the Spark Connect server\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                self.command(port),
                cwd=self.root,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() takes its Python workers along
                close_fds=True,
            )
        pid, url = self._proc.pid, f"sc://127.0.0.1:{port}"
        self._state.write({"pid": pid, "port": port, "url": url, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        log.info("Started Spark Connect server pid %s on port %s; logs in %s", pid, port, self.log_file)
        self._wait_ready(pid, timeout)
        return url

    def _wait_ready(self, pid: int, timeout: float) -> None:
        """Return once the server accepts connections (it binds its port after its Spark is up)."""
        deadline = time.monotonic() + timeout
        port = int(self._state.read()["port"])
        while True:
            if self._proc is not None and self._proc.pid == pid:
                self._proc.poll()
            if not pid_alive(pid):
                raise self._failure(f"the Spark Connect server (pid {pid}) exited during start-up")
            if port_accepts(port):
                log.info("Spark Connect server ready at sc://127.0.0.1:%s", port)
                return
            if time.monotonic() > deadline:
                raise self._failure(
                    f"the Spark Connect server (pid {pid}) did not accept clients on port {port} within {timeout}s; "
                    "it is left running (stop it with `joinshift spark-server stop`)"
                )
            time.sleep(0.5)

    def _failure(self, what: str) -> SparkConnectError:
        return SparkConnectError(
            f"{what}\n--- last lines of {self.log_file} ---\n{tail(self.log_file)}"
            f"\n--- last lines of {self.out_file} ---\n{tail(self.out_file, 15)}"
        )
