"""The embedded Kafka broker: a real Apache Kafka (KRaft, one node) on 127.0.0.1.

The streaming join needs a real broker (transactions, consumer groups, offsets that
Spark checkpoints refer to), but a developer machine should not need a cluster. So the
project runs one broker+controller JVM from the jars resolved into ``<jar_cache>/kafka``,
with everything it owns under ``<kafka_home>``:

* ``server.properties``  broker config, rewritten on every start from the settings below
* ``data/``              the log (and KRaft metadata) directory, formatted once
* ``state.json``         pid, ports, bootstrap and cluster id, so later commands (other
                         Python processes, :func:`jobs.storage.kafka.bootstrap_servers`) find
                         the broker and reuse the same ports
* ``log4j2.properties``  sends the broker's logs to ``<log_dir>/kafka.log``

If ``Settings.kafka_bootstrap`` is set, none of this is used: :func:`jobs.storage.kafka.bootstrap_servers`
returns it, and the same pipelines run against an external cluster. Kafka clients (topics,
offsets, health probes) come from :mod:`jobs.storage.kafka`; the broker's settings, JVM options
and start-up helpers from :mod:`jobs.local.kafka_setup`.

CLI: ``joinshift kafka {start,stop,status}``.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any

from jobs.local.kafka_setup import (
    BROKER_SETTINGS,
    JVM_OPTS,
    LOG4J2,
    NODE_ID,
    BrokerError,
    BrokerJvm,
    ServiceState,
    broker_answers,
    cluster_id_on_disk,
    free_ports,
    kraft_properties,
    port_is_free,
    random_cluster_id,
    terminate,
    write_properties,
)
from jobs.settings import Settings, settings
from jobs.storage.processes import cmdline, pid_alive

__all__ = ["BROKER_SETTINGS", "JVM_OPTS", "LOG4J2", "BrokerError", "EmbeddedKafka"]

log = logging.getLogger("joinshift.kafka")


class EmbeddedKafka:
    """The project-local broker described by ``Settings`` (its folder, jars and logs).

    Several Python processes may create one for the same ``kafka_home``; the broker's
    state lives on disk (``state.json``), not in this object, so ``start`` in one
    process and ``stop`` in another work together.
    """

    def __init__(self, s: Settings | None = None, *, sasl_users: dict[str, str] | None = None) -> None:
        """``sasl_users`` (user -> password): clients must authenticate (SASL_PLAINTEXT, PLAIN),
        as on a secured cluster; the broker talks to itself as the first user."""
        self.settings = s if s is not None else settings()
        self.sasl_users = dict(sasl_users or {})
        self.home = Path(self.settings.kafka_home)
        self.data_dir = self.home / "data"
        self.config_file = self.home / "server.properties"
        self._state = ServiceState(self.home, BrokerError)
        self.state_file = self._state.file
        self.log4j_file = self.home / "log4j2.properties"
        self.log_dir = Path(self.settings.log_dir)
        self.log_file = self.log_dir / "kafka.log"
        #: JVM stdout/stderr: what happens before log4j is up (bad flags, crashes).
        self.out_file = self.log_dir / "kafka.out"
        self.jar_dir = Path(self.settings.jar_cache) / "kafka"
        self.jvm = BrokerJvm(
            self.jar_dir, Path(self.settings.jar_cache), self.home, self.log4j_file, self.log_file, self.out_file
        )
        self._proc: subprocess.Popen[bytes] | None = None

    # -- state on disk ---------------------------------------------------------------

    def _pid(self) -> int | None:
        """The recorded pid, if that process is still our broker (pids get reused)."""
        pid = self._state.read().get("pid")
        if not isinstance(pid, int) or not pid_alive(pid):
            return None
        cmd = cmdline(pid)
        if cmd and ("kafka.Kafka" not in cmd or str(self.config_file) not in cmd):
            return None
        return pid

    # -- public API ------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """The address clients use; known (and stable) once the broker was first started."""
        bootstrap = self._state.read().get("bootstrap")
        if not bootstrap:
            raise BrokerError(f"the embedded broker in {self.home} has never been started")
        return str(bootstrap)

    def is_running(self) -> bool:
        """The broker process is alive (it may still be starting up)."""
        return self._pid() is not None

    def start(self, timeout: float = 60) -> str:
        """Starts the broker unless it already runs; returns its bootstrap servers.

        The JVM is detached (own session) so it keeps running after this command ends:
        jobs, Spark and later CLI calls all share it.
        """
        with self._state.lock():
            state = self._state.read()
            pid = self._pid()
            if pid is not None:
                bootstrap = str(state["bootstrap"])
                if broker_answers(bootstrap):
                    log.info("Kafka broker already running (pid %s) at %s", pid, bootstrap)
                    return bootstrap
                log.info("Kafka broker pid %s is up but not answering yet; waiting", pid)
                self._wait_ready(pid, bootstrap, timeout)
                return bootstrap
            return self._spawn(state, timeout)

    def stop(self, timeout: float = 30) -> None:
        """Stops the broker cleanly (SIGTERM: it flushes and marks its logs clean, so the
        next start needs no recovery); SIGKILL only if it does not exit in time."""
        with self._state.lock():
            pid = self._pid()
            if pid is None:
                log.info("Kafka broker in %s is not running", self.home)
                return
            terminate(pid, timeout, self._proc, "Kafka broker")
            self._state.mark_stopped()
            log.info("Kafka broker stopped")

    def status(self) -> dict[str, Any]:
        """What a person (or `joinshift kafka status`) wants to know, as plain JSON data."""
        state = self._state.read()
        pid = self._pid()
        info: dict[str, Any] = {
            "running": pid is not None,
            "pid": pid,
            "bootstrap": state.get("bootstrap"),
            "kafka_home": str(self.home),
            "data_dir": str(self.data_dir),
            "config": str(self.config_file),
            "log_file": str(self.log_file),
            "cluster_id": state.get("cluster_id"),
        }
        if pid is not None and state.get("bootstrap"):
            try:
                from jobs.storage import kafka

                info["topics"] = kafka.topic_offsets(str(state["bootstrap"]))
            except Exception as e:  # a status call should report, not fail
                info["topics"] = None
                info["error"] = f"broker not answering: {e}"
        return info

    # -- internals -------------------------------------------------------------------

    def _ports(self, state: dict[str, Any]) -> tuple[int, int]:
        """The ports of the first start, or fresh ones; taken ports are an error, never
        silently replaced, because checkpoints and offsets name the bootstrap."""
        port, cport = state.get("port"), state.get("controller_port")
        if not port or not cport:
            port, cport = free_ports(2)
            log.info("Kafka broker will use ports %s (clients) and %s (controller)", port, cport)
            return port, cport
        taken = [p for p in (port, cport) if not port_is_free(p)]
        if taken:
            raise BrokerError(
                f"port(s) {', '.join(map(str, taken))} on 127.0.0.1, which the embedded broker "
                f"in {self.home} used before, are now taken by another process. Stop that "
                "process (see `ss -ltnp`), or delete the 'port' and 'controller_port' entries "
                f"of {self.state_file} to pick new ports (Spark checkpoints that name the old "
                "bootstrap will then no longer match)."
            )
        return int(port), int(cport)

    def _write_config(self, port: int, cport: int) -> None:
        props = kraft_properties(NODE_ID, port, cport, f"{NODE_ID}@127.0.0.1:{cport}", self.data_dir, BROKER_SETTINGS)
        if self.sasl_users:  # the client listener authenticates; the controller stays on loopback
            me, pw = next(iter(self.sasl_users.items()))
            users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            props.update(
                {
                    "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                    "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name": "SASL_PLAINTEXT",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                        "org.apache.kafka.common.security.plain.PlainLoginModule required "
                        f'username="{me}" password="{pw}" {users};'
                    ),
                }
            )
        write_properties(self.config_file, props, "jobs/local/kafka_broker.py")
        self.jvm.write_log_config()

    def _spawn(self, state: dict[str, Any], timeout: float) -> str:
        self.jvm.check_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        port, cport = self._ports(state)
        self._write_config(port, cport)

        cluster_id = cluster_id_on_disk(self.data_dir)
        if cluster_id is None:
            cluster_id = random_cluster_id()
            self.jvm.format_storage(cluster_id, self.config_file)

        bootstrap = f"127.0.0.1:{port}"
        self._proc = self.jvm.spawn(self.config_file)
        pid = self._proc.pid
        state.update(
            pid=pid,
            port=port,
            controller_port=cport,
            bootstrap=bootstrap,
            cluster_id=cluster_id,
            data_dir=str(self.data_dir),
            log_file=str(self.log_file),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        self._state.write(state)
        log.info("Started Kafka broker pid %s at %s; logs in %s", pid, bootstrap, self.log_file)
        self._wait_ready(pid, bootstrap, timeout)
        return bootstrap

    def _wait_ready(self, pid: int, bootstrap: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not pid_alive(pid):
                raise self.jvm.failure(f"Kafka broker (pid {pid}) exited during start-up")
            if broker_answers(bootstrap):
                log.info("Kafka broker ready at %s", bootstrap)
                return
            if time.monotonic() > deadline:
                raise self.jvm.failure(
                    f"Kafka broker (pid {pid}) did not answer at {bootstrap} within {timeout}s; "
                    "it is left running (stop it with `joinshift kafka stop`)"
                )
            time.sleep(0.5)
