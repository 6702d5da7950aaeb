"""The Spark driver's JVM as this process starts it: the master it must reach, its output
forwarded less what says nothing to act on, and its own words when it exits as it starts."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from typing import IO

from jobs.settings import SettingsError

#: What the driver JVM prints that says nothing to act on: Spark 4 adds
#: ``--add-modules=jdk.incubator.vector`` to every JVM it launches (SPARK-48021), and the JVM
#: announces incubator modules on stderr; the Python process that plans a
#: ``transformWithState`` query (the paced engine) prints its every step, each line followed
#: by an empty one. Every other line of the JVM's output passes through.
_HARMLESS_JVM_LINES = (
    b"WARNING: Using incubator modules",
    b"Starting Streaming TransformWithStateInPandas Python worker",
    b"Streaming TransformWithStateInPandas Python worker",
)


class SparkMasterUnavailable(RuntimeError):
    """No standalone master answers at ``spark_master``."""


def answers(host: str, port: int, timeout: float = 2) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def check_master(master: str, timeout: float = 5) -> None:
    """A standalone master (``spark://host:port[,host:port...]``) none of whose addresses accept
    a connection is one line at once: Spark's driver would retry for a minute, then end in a
    traceback. Other masters (local, YARN, Kubernetes) are Spark's to reach."""
    if not master.startswith("spark://"):
        return
    addresses = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise SettingsError(f"spark_master {master!r}: write spark://host:port[,host:port]")
        addresses.append((host.strip("[]"), int(port)))
    if not any(answers(host, port, timeout) for host, port in addresses):
        raise SparkMasterUnavailable(
            f"no Spark master answers at {master} (spark_master): start the cluster, or set "
            "JOINSHIFT_SPARK_MASTER to one that runs (local[*] runs Spark in this process)"
        )


def launch_quiet_gateway(options: dict[str, str]) -> None:
    """Start the driver JVM (py4j gateway) as pyspark would, its stdout and stderr forwarded line
    by line less :data:`_HARMLESS_JVM_LINES`, so a run that succeeds prints nothing. A JVM that
    exits as it starts is one line quoting the JVM's own reason (the heap it could not reserve,
    the option it did not know), which it writes to either stream."""
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM is up already (this process started it)
        return
    conf = SparkConf(loadDefaults=False)
    for k, v in options.items():
        conf.set(k, str(v))
    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": out_w, "stderr": err_w})
    except PySparkRuntimeError as exc:
        os.close(out_w)
        os.close(err_w)
        said = _reason(_drain(out_r) + _drain(err_r))
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise SettingsError(
            f"the Spark driver's JVM exited as it started{f' ({said})' if said else ''}: check spark_master "
            f"({options.get('spark.master', 'unset')}), its options (spark_driver_java_options, spark_conf's "
            f"spark.driver.*), spark_driver_memory ({options.get('spark.driver.memory', 'unset')}) and JAVA_HOME"
        ) from None
    os.close(out_w)
    os.close(err_w)
    for fd, stream, name in ((out_r, sys.stdout, "jvm-stdout"), (err_r, sys.stderr, "jvm-stderr")):
        threading.Thread(target=_forward, args=(os.fdopen(fd, "rb"), stream), name=name, daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def _forward(src: IO[bytes], stream: IO[str]) -> None:
    out = getattr(stream, "buffer", None)
    for line in iter(src.readline, b""):
        if out is not None and line.strip() and not line.startswith(_HARMLESS_JVM_LINES):
            with contextlib.suppress(Exception):
                out.write(line)
                out.flush()


def _drain(fd: int) -> list[str]:
    """The lines a JVM that has exited left in the pipe ``fd`` (closed after)."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError), os.fdopen(fd, "rb") as src:
        while chunk := src.read(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").splitlines()


def _reason(lines: list[str]) -> str:
    """The JVM's line that says why it exited: not its "Error: ..." framing, nor what is harmless."""
    said = [
        line.strip()
        for line in lines
        if line.strip()
        and not line.startswith(("Error: ", "Error occurred"))
        and not line.encode().startswith(_HARMLESS_JVM_LINES)
    ]
    return said[0] if said else ""
