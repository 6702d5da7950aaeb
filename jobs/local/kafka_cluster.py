"""A local multi-node Kafka cluster: N KRaft nodes (broker + controller each) on 127.0.0.1.

What the embedded broker (:mod:`jobs.local.kafka_broker`) is for one machine, this is for
proving the pipeline on a replicated cluster (``tests/integration/test_cluster.py``): the same
jars, JVM options, data-keeping settings and start-up steps (:mod:`jobs.local.kafka_setup`), with

* a controller quorum of every node (static voters), so the cluster survives losing a minority;
* every partition, internal topics included, on ``replicas`` nodes (default 3) and an
  ``acks=all`` write acknowledged once ``min_isr`` (default 2) hold it;
* each node's data, config and log4j file under ``<root>/node-<id>/``, its log in
  ``<root>/logs/kafka-<id>.log`` (JVM console: ``kafka-<id>.out``), on free ports.

Nothing outside :mod:`jobs.local` and the tests uses it: a pipeline finds this cluster like any
other, through ``JOINSHIFT_KAFKA_BOOTSTRAP`` (:attr:`KafkaCluster.bootstrap`).

Example::

    with KafkaCluster(tmp / "kafka", s) as cluster:
        bootstrap = cluster.bootstrap            # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        victim = cluster.leader("topic", 0)
        cluster.kill(victim)                     # SIGKILL, as a crashed machine
        cluster.restart(victim)                  # same ports and data
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.local.kafka_setup import (
    BROKER_SETTINGS,
    BrokerError,
    BrokerJvm,
    LocalService,
    broker_answers,
    cluster_id_on_disk,
    free_ports,
    kraft_properties,
    random_cluster_id,
    replicated_settings,
    wait_exit,
    write_properties,
)
from jobs.settings import Settings, settings
from jobs.storage.processes import pid_alive

log = logging.getLogger("joinshift.kafka")

#: The topology the cluster test proves and docker-compose.yml mirrors: 3 nodes, every partition
#: on 3 of them, a write acknowledged once 2 hold it (one node may die).
NODES, REPLICAS, MIN_ISR = 3, 3, 2


@dataclass
class KafkaNode:
    """One node of the cluster: its id (broker and voter id), ports, files and process."""

    node_id: int
    port: int
    controller_port: int
    home: Path
    jvm: BrokerJvm
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def alive(self) -> bool:
        if self.proc is None:
            return False
        return self.proc.poll() is None and pid_alive(self.proc.pid)


class KafkaCluster(LocalService):
    """``nodes`` combined broker+controller nodes on loopback, started and stopped together; every
    partition on ``replicas`` of them, ``min_isr`` in sync for an ``acks=all`` write.

    ``start()`` formats each node's storage once (one cluster id), starts every node and returns
    when each answers and all of them are registered brokers; ``stop()`` stops them cleanly
    (SIGTERM, then SIGKILL). Used as a context manager, it starts on enter and stops on exit.
    """

    def __init__(
        self,
        root: str | Path,
        s: Settings | None = None,
        *,
        nodes: int = NODES,
        replicas: int = REPLICAS,
        min_isr: int = MIN_ISR,
    ) -> None:
        self.root = Path(root)
        self.settings = s if s is not None else settings()
        self.replicas, self.min_isr = replicas, min_isr
        if not 1 <= min_isr <= replicas <= nodes:
            raise ValueError(f"need 1 <= min_isr ({self.min_isr}) <= replicas ({self.replicas}) <= nodes ({nodes})")
        jar_cache = Path(self.settings.jar_cache)
        log_dir = self.root / "logs"
        ports = free_ports(2 * nodes)
        self.nodes: dict[int, KafkaNode] = {}
        for i in range(1, nodes + 1):
            home = self.root / f"node-{i}"
            jvm = BrokerJvm(
                jar_cache / "kafka",
                jar_cache,
                home,
                home / "log4j2.properties",
                log_dir / f"kafka-{i}.log",
                log_dir / f"kafka-{i}.out",
            )
            self.nodes[i] = KafkaNode(i, ports[2 * i - 2], ports[2 * i - 1], home, jvm)
        self.voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        self.broker_settings = {**BROKER_SETTINGS, **replicated_settings(self.replicas, self.min_isr)}

    # -- public API ------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated: what ``JOINSHIFT_KAFKA_BOOTSTRAP`` takes."""
        return ",".join(n.address for n in self.nodes.values())

    def live_bootstrap(self) -> str:
        """The client addresses of the nodes running now (for clients that must not wait on a dead one)."""
        return ",".join(n.address for n in self.nodes.values() if n.alive())

    def start(self, timeout: float = 120) -> str:
        """Start every node that is not running; return :attr:`bootstrap` once all are brokers."""
        self.nodes[1].jvm.check_jars()
        cluster_id = next(filter(None, (cluster_id_on_disk(n.data_dir) for n in self.nodes.values())), None)
        cluster_id = cluster_id or random_cluster_id()
        for node in self.nodes.values():
            self._prepare(node, cluster_id)
        for node in self.nodes.values():
            if not node.alive():
                self._spawn(node)
        self._wait_ready(list(self.nodes), timeout)
        log.info("Kafka cluster of %d nodes ready at %s (logs in %s)", len(self.nodes), self.bootstrap, self.log_dir)
        return self.bootstrap

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every running node (a clean shutdown), SIGKILL those still up after ``timeout``."""
        running = [n for n in self.nodes.values() if n.alive()]
        for node in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        for node in running:
            pid = node.proc.pid  # type: ignore[union-attr]
            if not wait_exit(pid, max(0.0, deadline - time.monotonic()), node.proc):
                log.warning("Kafka node %d (pid %s) ignored SIGTERM for %ss; killing it", node.node_id, pid, timeout)
                self.kill(node.node_id)
        log.info("Kafka cluster stopped")

    def kill(self, node_id: int) -> None:
        """SIGKILL one node, as a machine that dies: no clean shutdown, no leadership handed over."""
        node = self.nodes[node_id]
        if node.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.proc.pid, signal.SIGKILL)
        wait_exit(node.proc.pid, 10, node.proc)
        log.info("Kafka node %d (pid %s) killed", node_id, node.proc.pid)

    def restart(self, node_id: int, timeout: float = 120) -> None:
        """Start a stopped or killed node again, with its ports and data; return once it answers."""
        node = self.nodes[node_id]
        if node.alive():
            return
        self._spawn(node)
        self._wait_ready([node_id], timeout)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``'s ``partition`` now, as the cluster's metadata says."""
        leaders = partition_leaders(self.live_bootstrap(), topic)
        if partition not in leaders:
            raise BrokerError(f"{topic}[{partition}] does not exist on {self.bootstrap}")
        return leaders[partition]

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    # -- internals -------------------------------------------------------------------

    def _prepare(self, node: KafkaNode, cluster_id: str) -> None:
        node.data_dir.mkdir(parents=True, exist_ok=True)
        props = kraft_properties(
            node.node_id, node.port, node.controller_port, self.voters, node.data_dir, self.broker_settings
        )
        write_properties(node.config_file, props, "jobs/local/kafka_cluster.py")
        node.jvm.write_log_config()
        if cluster_id_on_disk(node.data_dir) is None:
            node.jvm.format_storage(cluster_id, node.config_file)

    def _spawn(self, node: KafkaNode) -> None:
        node.proc = node.jvm.spawn(node.config_file, f"node {node.node_id}")
        log.info("Started Kafka node %d (pid %s) at %s", node.node_id, node.proc.pid, node.address)

    def _wait_ready(self, node_ids: list[int], timeout: float) -> None:
        """Each node answers a metadata request, and the cluster lists every live node as a broker."""
        deadline = time.monotonic() + timeout
        waiting = set(node_ids)
        while True:
            for i in sorted(waiting):
                node = self.nodes[i]
                if not node.alive():
                    raise node.jvm.failure(f"Kafka node {i} exited during start-up")
                if broker_answers(node.address):
                    waiting.discard(i)
            if not waiting:
                live = {n.node_id for n in self.nodes.values() if n.alive()}
                with contextlib.suppress(Exception):  # a node still registering: ask again
                    if live <= set(cluster_brokers(self.live_bootstrap())):
                        return
            if time.monotonic() > deadline:
                stuck = min(waiting) if waiting else node_ids[0]
                raise self.nodes[stuck].jvm.failure(
                    f"Kafka nodes {sorted(waiting) or node_ids} did not become ready within {timeout}s"
                )
            time.sleep(0.5)


# -- the cluster's metadata, asked through the one Kafka client module -------------------


def cluster_brokers(bootstrap: str) -> list[int]:
    """Node ids of the cluster's registered, unfenced brokers (those that serve partitions)."""
    from jobs.storage import kafka

    admin = kafka.admin_client(bootstrap, request_timeout_ms=kafka.REQUEST_TIMEOUT_MS)
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    return sorted(int(b["broker_id"]) for b in brokers if not b.get("is_fenced"))


def partition_replicas(bootstrap: str, topic: str) -> dict[int, dict[str, Any]]:
    """``{partition: {"leader": node id, "replicas": [...], "isr": [...]}}`` of ``topic`` as the
    cluster's metadata says now; {} when the topic does not exist."""
    from jobs.storage import kafka

    admin = kafka.admin_client(bootstrap, request_timeout_ms=kafka.REQUEST_TIMEOUT_MS)
    try:
        described = admin.describe_topics([topic])
    finally:
        admin.close()
    return {
        int(p["partition_index"]): {
            "leader": int(p["leader_id"]),
            "replicas": sorted(int(r) for r in p["replica_nodes"]),
            "isr": sorted(int(r) for r in p["isr_nodes"]),
        }
        for t in described
        if t.get("name") == topic and not t.get("error_code")
        for p in t.get("partitions") or []
    }


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: leader node id}`` of ``topic`` (-1: no leader right now)."""
    return {p: r["leader"] for p, r in partition_replicas(bootstrap, topic).items()}
