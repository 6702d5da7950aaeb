"""Clusters, proven: the streaming join on a Spark standalone cluster (a master, two 1-core
workers) reading a 3-node KRaft Kafka cluster (replication factor 3, min ISR 2), pointed at them
by configuration only (``JOINSHIFT_*`` of a separate ``joinshift stream`` process), loses the
leader of a partition mid-stream (SIGKILL) and keeps going; its Delta output equals a single-node
run's (local Spark, the embedded broker, uninterrupted) as a multiset: nothing lost, nothing
duplicated. ``docker-compose.yml`` mirrors this topology."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

#: Left events of the one generated day (~2.5 records per left event over both topics).
LEFT_EVENTS = 150
#: Records per micro-batch and topic: each half of the workload takes a few micro-batches.
MAX_OFFSETS = 60
#: Bounds on waiting for the clusters' processes (a failure, never a measurement).
STEP_TIMEOUT_S = 240


def _generated(base_spec, spec, seed: int):
    """One generated day of both streams as Kafka records (sorted by arrival), on ``spec``'s topics."""
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams

    wl = generate(WorkloadParams(left_events_per_day=LEFT_EVENTS, days=1, seed=seed), base_spec)
    topics = {base_spec.left.topic: spec.left.topic, base_spec.right.topic: spec.right.topic}
    return wl.records.assign(topic=wl.records.topic.map(topics)).reset_index(drop=True)


def _single_node_output(spark, spec, bootstrap: str, s) -> tuple[list[tuple], int]:
    """The oracle: one uninterrupted availableNow run on local Spark and the embedded broker;
    its output rows and the watermark it ends on (after any final no-data micro-batch)."""
    from jobs.local.chaos import output_rows
    from jobs.steps.stream import start_streaming_join, stream_watermark
    from jobs.storage.progress import JOIN_QUERY, settle_log
    from jobs.storage.tables import Tables

    (q,) = start_streaming_join(spark, spec, bootstrap=bootstrap, s=s, available_now=True, quarantine=False)
    q.awaitTermination()
    settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), q)
    watermark = stream_watermark(spec, s)
    assert watermark is not None
    return output_rows(spark, spec, s), watermark


def _asked(question, otherwise=None):
    """The answer, or ``otherwise`` while a cluster cannot answer (a partition without a leader yet,
    a node that is down or still starting): for conditions that are polled until they hold."""
    try:
        return question()
    except Exception:
        return otherwise


def _replicas(partitions: dict) -> dict:
    return {p: {k: r[k] for k in ("replicas", "isr")} for p, r in partitions.items()}


def _daemon_command_lines(spark_cluster) -> list[list[str]]:
    """The command lines of the cluster's master and worker JVMs (found by the master's port)."""
    import psutil

    port = str(spark_cluster.port)
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(a.startswith("org.apache.spark.deploy.") for a in cmd) and any(
            a == port or a.endswith(f":{port}") for a in cmd
        ):
            found.append(cmd)
    return found


def _start_clusters(stack: contextlib.ExitStack, root, s):
    """A Spark standalone cluster and a 3-node Kafka cluster, started side by side."""
    from jobs.local.kafka_cluster import KafkaCluster
    from jobs.local.spark_cluster import SparkCluster

    spark_cluster = SparkCluster(root / "spark", workers=2, cores=1, memory="1g")
    stack.callback(spark_cluster.stop)
    spark_cluster.start(wait=False)
    kafka_cluster = stack.enter_context(KafkaCluster(root / "kafka", s, nodes=3, replicas=3, min_isr=2))
    spark_cluster.wait_ready()
    return spark_cluster, kafka_cluster


def test_the_stream_on_a_spark_and_a_kafka_cluster_loses_a_partition_leader_and_nothing_else(
    spark, kafka, demo_spec, test_settings, test_root
):
    from jobs.local.chaos import isolated_spec, output_rows, wait_until
    from jobs.local.kafka_cluster import partition_replicas
    from jobs.local.spark_cluster import SparkCluster
    from jobs.operate.process import StreamProcess
    from jobs.spec import write_spec
    from jobs.steps.stream import stream_lag, stream_watermark
    from jobs.storage.kafka import create_topic
    from jobs.workload.publisher import publish

    t0 = time.monotonic()
    name = "cluster"
    root = test_root / name
    spec = isolated_spec(demo_spec, name, max_offsets=MAX_OFFSETS)  # watermarks wide: no record is late
    records = _generated(demo_spec, spec, seed=5)
    first, second = records.iloc[: len(records) // 2], records.iloc[len(records) // 2 :]

    timings: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        spark_cluster, kafka_cluster = _start_clusters(stack, root, test_settings)
        timings["clusters up"] = time.monotonic() - t0
        daemons = _daemon_command_lines(spark_cluster)
        assert len(daemons) == 3, daemons  # the master and both workers, each JVM with C1 alone
        assert all(SparkCluster.DAEMON_JAVA_OPTS in cmd for cmd in daemons), daemons
        # the pipeline's whole view of the clusters: its settings, handed over as JOINSHIFT_* variables
        on_cluster = dataclasses.replace(
            test_settings,
            spark_master=spark_cluster.master_url,
            kafka_bootstrap=kafka_cluster.bootstrap,
            storage_root=str(root / "storage"),
            log_dir=str(root / "logs"),
            spark_driver_memory="1g",
        )
        bootstrap = on_cluster.kafka_bootstrap
        everywhere = {p: {"replicas": [1, 2, 3], "isr": [1, 2, 3]} for p in (0, 1)}
        for st in (spec.left, spec.right):
            create_topic(bootstrap, st.topic)  # replication factor: the cluster's default
            # each partition on all 3 nodes, in sync (as soon as the broker asked knows the topic)
            assert wait_until(
                lambda t=st.topic: _replicas(_asked(lambda: partition_replicas(bootstrap, t), {})) == everywhere,
                STEP_TIMEOUT_S,
            ), partition_replicas(bootstrap, st.topic)
        publish(first, bootstrap)

        proc = StreamProcess(write_spec(spec, root / "cluster.yaml"), spec, on_cluster, trigger_interval="1s")
        stack.callback(proc.stop)
        proc.start()

        # the oracle, while the stream process starts: a single-node run over the same records
        for st in (spec.left, spec.right):
            create_topic(kafka, st.topic)
        publish(records, kafka)
        single = dataclasses.replace(test_settings, storage_root=str(root / "single-node"))
        expected, final_watermark = _single_node_output(spark, isolated_spec(demo_spec, name, None), kafka, single)
        assert len(expected) > 100
        timings["single-node run"] = time.monotonic() - t0

        def failure(what: str) -> str:
            from jobs.local.kafka_setup import tail

            lag = _asked(lambda: stream_lag(spec, kafka_cluster.live_bootstrap(), on_cluster))
            watermark = stream_watermark(spec, on_cluster)
            return (
                f"{what}: lag {lag}, watermark {watermark} (single-node run's: {final_watermark})"
                f"\n--- {proc.log_file} ---\n{tail(proc.log_file, 30)}"
            )

        def read_all(live: str) -> bool:
            if not proc.alive():
                raise AssertionError(failure("the stream process exited"))
            return _asked(lambda: stream_lag(spec, live, on_cluster)) == 0

        assert wait_until(lambda: read_all(bootstrap), STEP_TIMEOUT_S, step=0.5), failure("first half not read")
        timings["first half read"] = time.monotonic() - t0
        apps = spark_cluster.status()["activeapps"]
        assert [(a["name"], a["cores"]) for a in apps if a["state"] == "RUNNING"] == [("joinshift-stream-join", 2)]

        # mid-stream: SIGKILL the leader of a partition, then publish the rest while it fails over
        topic = spec.left.topic
        victim = kafka_cluster.leader(topic, 0)
        kafka_cluster.kill(victim)
        live = kafka_cluster.live_bootstrap()
        publish(second, live)  # acks=all: 2 in-sync replicas are enough (min ISR 2)
        timings["leader killed, second half published"] = time.monotonic() - t0
        survivors = sorted({1, 2, 3} - {victim})

        def failed_over() -> bool:
            now = _asked(lambda: partition_replicas(live, topic), {}).get(0, {})
            return now.get("leader") in survivors and now.get("isr") == survivors

        assert wait_until(failed_over, STEP_TIMEOUT_S), partition_replicas(live, topic)

        # the killed node comes back (same ports and data) while the stream reads the second half
        kafka_cluster.restart(victim)

        def caught_up() -> bool:
            # every record read, and the watermark where the single-node run ended (its last
            # no-data micro-batch done too): the output is complete
            return read_all(live) and stream_watermark(spec, on_cluster) == final_watermark

        assert wait_until(caught_up, STEP_TIMEOUT_S, step=0.5), failure("second half not read")
        timings["second half read"] = time.monotonic() - t0
        assert wait_until(
            lambda: _replicas(_asked(lambda: partition_replicas(bootstrap, topic), {})) == everywhere,
            STEP_TIMEOUT_S,
        ), f"node {victim} did not rejoin the in-sync replicas"
        # SIGTERM: the driver stops its query between micro-batches and its application, and exits
        assert proc.stop() == "stopped", failure("the stream process did not stop on SIGTERM")

    got = output_rows(spark, spec, on_cluster)
    timings["done"] = time.monotonic() - t0
    print({k: round(v, 1) for k, v in timings.items()})
    lost, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert got == expected, f"{len(lost)} rows lost (e.g. {lost[:3]}), {len(extra)} extra (e.g. {extra[:3]}); " + (
        f"{len(got) - len(set(got))} duplicates vs {len(expected) - len(set(expected))} in the single-node run"
    )
