"""The one door to Kafka: every client joinshift opens (Spark's source, kafka-python consumers,
producers and the admin client) is made here, with one set of timeouts and one set of client
properties (security and any other: :mod:`jobs.storage.kafka_config`).

Where Kafka is: the ``kafka_bootstrap`` setting; when it is empty, the address the embedded
broker (``joinshift kafka start``) recorded in ``<kafka_home>/state.json``, if it still runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.settings import Settings, settings
from jobs.storage.kafka_config import (
    MAX_RECORD_BYTES,
    TOPIC_CONFIGS,
    client_properties,
    python_client_config,
    spark_options,
)
from jobs.storage.processes import pid_alive

log = logging.getLogger("joinshift.kafka")

#: One timeout policy for every kafka-python client (ms).
REQUEST_TIMEOUT_MS = 10_000
BOOTSTRAP_TIMEOUT_MS = 5_000

Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset


class KafkaUnavailable(RuntimeError):
    """No Kafka to talk to; the message says how to point joinshift at one."""


def bootstrap_servers(s: Settings | None = None) -> str:
    """Where jobs find Kafka: the configured cluster, else the running embedded broker. Never starts
    a broker itself: a job silently spawning a JVM would hide a forgotten set-up step."""
    s = s if s is not None else settings()
    if s.kafka_bootstrap:
        return s.kafka_bootstrap
    try:
        state = json.loads((Path(s.kafka_home) / "state.json").read_text())
    except (OSError, ValueError):
        state = {}
    if state.get("bootstrap") and pid_alive(state.get("pid")):
        return str(state["bootstrap"])
    raise KafkaUnavailable(
        f"No Kafka broker: the embedded broker in {s.kafka_home} is not running. "
        "Start it with `joinshift kafka start`, "
        "or point at an existing cluster with JOINSHIFT_KAFKA_BOOTSTRAP=host:port."
    )


# ------------------------------------------------------------------ kafka-python clients


def _python_config(client: str) -> dict[str, Any]:
    """The configured client properties as kafka-python arguments for ``client`` (consumer,
    producer or admin)."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    cls = {"consumer": KafkaConsumer, "producer": KafkaProducer, "admin": KafkaAdminClient}[client]
    return python_client_config(client_properties(settings()), set(cls.DEFAULT_CONFIG))


def check_reachable(bootstrap: str, timeout_s: float = 10.0) -> str:
    """``bootstrap`` when a broker there answers within ``timeout_s``; else KafkaUnavailable in one
    line, before a command starts Spark or changes anything (Spark's own Kafka admin waits minutes)."""
    from kafka.errors import KafkaError

    try:
        ms = int(timeout_s * 1000)
        admin_client(bootstrap, request_timeout_ms=ms + 1000, bootstrap_timeout_ms=ms).close()
    except (KafkaError, ValueError) as exc:
        raise KafkaUnavailable(
            f"Kafka at {bootstrap} does not answer ({type(exc).__name__}): check kafka_bootstrap "
            "(JOINSHIFT_KAFKA_BOOTSTRAP), that its brokers run and the client properties (security) fit them"
        ) from None
    return bootstrap


def admin_client(bootstrap: str, **config: Any) -> Any:
    """A kafka-python admin client with the configured properties; the caller closes it."""
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, **{**_python_config("admin"), **config})


def _new_consumer(bootstrap: str, timeout_ms: int, **config: Any) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(
        **{
            **_python_config("consumer"),
            "bootstrap_servers": bootstrap,
            "enable_auto_commit": False,
            "request_timeout_ms": max(timeout_ms, 1000) + 1000,
            "bootstrap_timeout_ms": timeout_ms,
            **config,
        }
    )


@contextlib.contextmanager
def consumer(bootstrap: str, *, timeout_ms: int = BOOTSTRAP_TIMEOUT_MS, **config: Any) -> Iterator[Any]:
    """A kafka-python consumer that commits nothing, closed on exit."""
    c = _new_consumer(bootstrap, timeout_ms, **config)
    try:
        yield c
    finally:
        c.close()


class KafkaConsumerFor:
    """A consumer that reads given partitions from given offsets, as the paced engine's source
    does (its driver side ahead of what it admitted, its tasks a micro-batch's ranges): records come
    back as ``(offset, timestamp ms, value, key)`` per ``(topic, partition)``. It commits nothing."""

    def __init__(self, bootstrap: str, **config: Any):
        self._c = _new_consumer(bootstrap, BOOTSTRAP_TIMEOUT_MS, **config)
        self._tps: dict[tuple[str, int], Any] = {}

    def assign_at(self, positions: dict[tuple[str, int], int]) -> None:
        from kafka import TopicPartition

        self._tps = {tp: TopicPartition(*tp) for tp in positions}
        self._c.assign(list(self._tps.values()))
        for tp, offset in positions.items():
            self._c.seek(self._tps[tp], offset)

    def ends(self) -> dict[tuple[str, int], int]:
        """Each assigned partition's end offset (the offset its next record will get)."""
        ends = self._c.end_offsets(list(self._tps.values()))
        return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}

    def poll(
        self, max_records: int, timeout_ms: int = 500
    ) -> dict[tuple[str, int], list[tuple[int, int, bytes | None, bytes | None]]]:
        """The assigned partitions' next records, as far as one poll goes. (Never paused: kafka-python
        drops a paused partition's fetched records, and its position then skips them.)"""
        polled = self._c.poll(timeout_ms=timeout_ms, max_records=max_records)
        return {
            (tp.topic, tp.partition): [(r.offset, r.timestamp, r.value, r.key) for r in recs]
            for tp, recs in polled.items()
        }

    def close(self) -> None:
        self._c.close()


def partitions(c: Any, topic: str) -> list[Any]:
    """The topic's partitions as TopicPartitions, sorted; [] when the topic does not exist."""
    from kafka import TopicPartition

    return [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]


def end_offsets(
    bootstrap: str, topics: list[str], timeout_ms: int = BOOTSTRAP_TIMEOUT_MS, *, beginning: bool = False
) -> Offsets:
    """``{topic: {partition: end offset}}`` (the offset the next record will get); with
    ``beginning``, each partition's first offset Kafka still holds instead."""
    with consumer(bootstrap, timeout_ms=timeout_ms) as c:
        out: Offsets = {}
        for topic in topics:
            tps = partitions(c, topic)
            ends = (c.beginning_offsets if beginning else c.end_offsets)(tps) if tps else {}
            out[topic] = {tp.partition: int(off) for tp, off in ends.items()}
        return out


def topic_offsets(bootstrap: str) -> dict[str, dict[str, Any]]:
    """``{topic: {"partitions": n, "end_offsets": {partition: offset}}}``, internal topics left out."""
    with consumer(bootstrap, timeout_ms=REQUEST_TIMEOUT_MS) as c:
        out: dict[str, dict[str, Any]] = {}
        for topic in sorted(c.topics()):
            tps = partitions(c, topic)
            ends = {str(tp.partition): o for tp, o in sorted((c.end_offsets(tps) if tps else {}).items())}
            out[topic] = {"partitions": len(tps), "end_offsets": ends}
        return out


def lag(read: Offsets, ends: Offsets) -> int:
    """Records in ``ends`` not read yet by a reader at ``read``."""
    return sum(max(0, end - read.get(topic, {}).get(p, 0)) for topic, parts in ends.items() for p, end in parts.items())


def oldest_unread(bootstrap: str, read: Offsets, ends: Offsets, timeout_s: float = 5) -> dict[str, int]:
    """Per topic with unread records (``read`` < ``ends``), the oldest record timestamp (ms) in each
    lagging partition's next 500 offsets (producers' clocks differ: the first need not be the
    oldest); a topic silent for ``timeout_s`` is left out."""
    from kafka import TopicPartition

    start = lambda tp: read.get(tp.topic, {}).get(tp.partition, 0)  # noqa: E731
    tps = [TopicPartition(t, p) for t, parts in ends.items() for p in parts]
    # read to here: offsets, not records (transaction markers take offsets too); a stamp -1 says nothing
    todo = {tp: min(start(tp) + 500, end) for tp in tps if (end := ends[tp.topic][tp.partition]) > start(tp)}
    if not todo:
        return {}
    oldest: dict[Any, int] = {}
    with consumer(bootstrap, timeout_ms=int(timeout_s * 1000), consumer_timeout_ms=int(timeout_s * 1000)) as c:
        c.assign(list(todo))
        for tp in todo:
            c.seek(tp, start(tp))
        deadline = time.time() + timeout_s
        while todo and time.time() < deadline:  # a poll's records are shared by partitions
            for tp, recs in c.poll(timeout_ms=500, max_records=500).items():
                if stamps := [r.timestamp for r in recs if r.timestamp >= 0 and r.offset < todo.get(tp, -1)]:
                    oldest[tp] = min(stamps + [oldest.get(tp, stamps[0])])
            for tp in [tp for tp, to in todo.items() if (c.position(tp, timeout_ms=500) or -1) >= to]:
                del todo[tp]
                c.pause(tp)
    return {t: min(ts for tp, ts in oldest.items() if tp.topic == t) for t in {tp.topic for tp in oldest}}


def read_ranges(
    bootstrap: str, ranges: dict[str, dict[int, tuple[int, int]]], *, max_records: int, timeout_s: float = 5
) -> dict[str, list[tuple[int, int, bytes]]]:
    """``(partition, offset, value)`` of the records in ``{topic: {partition: (start, end)}}``
    (end exclusive), per topic: one consumer, at most ``max_records`` in all and ``timeout_s``
    of fetching (what could not be read in time is left out)."""
    from kafka import TopicPartition

    todo = {TopicPartition(t, p): se for t, parts in ranges.items() for p, se in parts.items() if se[1] > se[0]}
    out: dict[str, list[tuple[int, int, bytes]]] = {t: [] for t in ranges}
    if not todo:
        return out
    n = 0
    with consumer(bootstrap, timeout_ms=int(timeout_s * 1000), consumer_timeout_ms=int(timeout_s * 1000)) as c:
        c.assign(list(todo))
        for tp, (start, _) in todo.items():
            c.seek(tp, start)
        deadline = time.time() + timeout_s
        while todo and n < max_records and time.time() < deadline:
            for tp, recs in c.poll(timeout_ms=500, max_records=min(500, max_records - n)).items():
                end = todo.get(tp, (0, 0))[1]
                for r in recs:
                    if r.offset < end and n < max_records:
                        out[tp.topic].append((tp.partition, r.offset, r.value))
                        n += 1
                if recs and recs[-1].offset >= end - 1:
                    todo.pop(tp, None)
                    c.pause(tp)
    return out


class RetentionGap(RuntimeError):
    """Kafka no longer holds the records a replay (or a landing) needs."""


#: What a replay does when Kafka no longer holds its start (:class:`RetentionGap`'s advice).
REBUILD_ADVICE = (
    "the window cannot be rebuilt from Kafka. Rebuild it from the landed Delta tables instead "
    "(land the days, then run the batch join for them) or choose a later cut-over"
)


def offsets_for_time(bootstrap: str, topic: str, start: datetime, advice: str = REBUILD_ADVICE) -> dict[str, int]:
    """Per partition, the first offset whose timestamp is >= start; :class:`RetentionGap` when
    retention deleted records from ``start`` on (offsets-for-times would quietly answer with the
    earliest retained record instead), or the topic is gone."""
    with consumer(bootstrap, timeout_ms=REQUEST_TIMEOUT_MS, client_id="joinshift-replay") as c:
        tps = partitions(c, topic)
        if not tps:  # it holds nothing at all
            raise RetentionGap(f"topic {topic!r} does not exist on {bootstrap}; {advice}")
        start_ms = int(start.timestamp() * 1000)
        found = c.offsets_for_times({tp: start_ms for tp in tps})
        earliest = c.beginning_offsets(tps)
        latest = c.end_offsets(tps)
        out = {}
        for tp in tps:
            if earliest[tp] > 0:
                # records were deleted: is the oldest one still older than what we need?
                c.assign([tp])
                c.seek(tp, earliest[tp])
                first = next(iter(c.poll(timeout_ms=5000, max_records=1).get(tp, [])), None)
                if first is None or first.timestamp > start_ms:
                    oldest = datetime.fromtimestamp(first.timestamp / 1000, UTC) if first else None
                    raise RetentionGap(
                        f"{topic}[{tp.partition}] no longer holds records from {start.isoformat()}: the oldest "
                        f"retained record is from {oldest.isoformat() if oldest else 'nothing retained'}; {advice}"
                    )
            hit = found.get(tp)
            out[str(tp.partition)] = hit.offset if hit is not None else latest[tp]
        return out


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> dict[str, str]:
    """Creates ``name`` unless it exists; safe to call from every job that writes to it.

    Retention and timestamp configs are set on the topic itself (:data:`TOPIC_CONFIGS`); returns
    the values the topic has for them (an existing topic keeps its own, or its brokers' defaults).
    Replication is the cluster's default (1 on the embedded broker).
    """
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import TopicAlreadyExistsError

    admin = admin_client(bootstrap, request_timeout_ms=3 * REQUEST_TIMEOUT_MS)
    try:
        try:
            admin.create_topics(
                {name: {"num_partitions": partitions, "replication_factor": -1, "configs": TOPIC_CONFIGS}},
                wait_for_metadata=True,
            )
            log.info("Created topic %s (%d partitions)", name, partitions)
        except TopicAlreadyExistsError:
            existing = admin.describe_topics([name])
            n = len(existing[0].get("partitions") or []) if existing else None
            if n is not None and n != partitions:
                log.warning("Topic %s already exists with %s partitions (asked for %s)", name, n, partitions)
            res = ConfigResource(ConfigResourceType.TOPIC, name, configs=dict.fromkeys(TOPIC_CONFIGS))
            found = admin.describe_configs([res], config_filter="all")["topic"][name]
            return {k: v["value"] for k, v in found.items()}
    finally:
        admin.close()
    return dict(TOPIC_CONFIGS)


def delete_topics(bootstrap: str, topics: list[str], timeout_s: float = 20) -> None:
    """Delete those of ``topics`` that exist, and wait until the cluster no longer lists them."""
    admin = admin_client(bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        doomed = [t for t in topics if t in set(admin.list_topics())]
        if doomed:
            admin.delete_topics(doomed)
            deadline = time.time() + timeout_s
            while set(admin.list_topics()) & set(doomed) and time.time() < deadline:
                time.sleep(0.2)
    finally:
        admin.close()


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """KafkaProducer settings for publishing: batching, zstd, acks=all, idempotent (ordered),
    with the configured client properties."""
    return {
        **_python_config("producer"),
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "compression_type": "zstd",
        "linger_ms": 20,
        "batch_size": 256 * 1024,
        "max_request_size": MAX_RECORD_BYTES,
        "enable_idempotence": True,
        "client_id": "joinshift-workload",
        **overrides,
    }


def producer(bootstrap: str, **overrides: Any) -> Any:
    """A KafkaProducer with :func:`producer_config`; the caller flushes and closes it."""
    from kafka import KafkaProducer

    return KafkaProducer(**producer_config(bootstrap, **overrides))


def is_client_error(exc: BaseException) -> bool:
    """Whether ``exc`` is kafka-python's own (a client's failure or a broker's refusal), not a bug."""
    from kafka.errors import KafkaError

    return isinstance(exc, KafkaError)


# ------------------------------------------------------------------ Spark's Kafka source


def read_stream(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
) -> DataFrame:
    """Spark's Kafka source over one topic, failing (not skipping) when records were deleted."""
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_options(client_properties(settings())))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
    )
    limit = {"maxOffsetsPerTrigger": str(max_offsets_per_trigger)} if max_offsets_per_trigger else {}
    return reader.options(**limit).load()


#: How far past the end of a time range a partition is read for records stamped inside it: a producer's
#: CreateTime need not grow with the offset (producers whose clocks differ share a partition), so
#: records of the range may sit after the first offset stamped at its end. A day is read; more is not.
MAX_TIMESTAMP_DISORDER_MS = 86_400_000
#: Records after a partition's stop offset checked for one stamped in the range: a record stamped
#: years ahead is every later day's stop, and a read ending there left all behind it unread.
STOP_CHECK_RECORDS = 500


def range_offsets(c: Any, tps: list[Any], start_ms: int, end_ms: int) -> dict[Any, tuple[int, int]]:
    """``[first, last)`` offsets per partition holding its records stamped in ``[start_ms, end_ms)``:
    from its first offset stamped at or after ``start_ms`` to its first stamped at or after ``end_ms``
    + :data:`MAX_TIMESTAMP_DISORDER_MS`; to its end when there is none or a record just after that
    one is stamped before ``end_ms`` (the stop was stamped ahead). first == last: nothing to read."""
    starts = c.offsets_for_times({tp: start_ms for tp in tps})
    stops = c.offsets_for_times({tp: end_ms + MAX_TIMESTAMP_DISORDER_MS for tp in tps})
    ends = c.end_offsets(tps)
    out = {}
    for tp in tps:
        first, stop = starts.get(tp), stops.get(tp)
        last = ends[tp] if stop is None or _stamped_ahead(c, tp, stop.offset, ends[tp], end_ms) else stop.offset
        out[tp] = (min(first.offset, last), last) if first is not None else (last, last)
    return out


def _stamped_ahead(c: Any, tp: Any, stop: int, end: int, end_ms: int) -> bool:
    """Whether a record just after ``stop`` is stamped before ``end_ms`` (or cannot be read)."""
    upto, seen = min(end, stop + 1 + STOP_CHECK_RECORDS), stop + 1
    c.assign([tp])
    c.seek(tp, seen)
    while seen < upto:
        recs = c.poll(timeout_ms=REQUEST_TIMEOUT_MS, max_records=upto - seen).get(tp, [])
        if not recs or any(r.timestamp < end_ms for r in recs if r.offset < upto):
            return True
        seen = recs[-1].offset + 1
    return False


def read_range(spark: SparkSession, bootstrap: str, topic: str, start_ms: int, end_ms: int) -> DataFrame:
    """A batch read of ``topic``'s records stamped in ``[start_ms, end_ms)``, over :func:`range_offsets`."""
    with consumer(bootstrap, timeout_ms=REQUEST_TIMEOUT_MS) as c:
        ranges = {tp.partition: fl for tp, fl in range_offsets(c, partitions(c, topic), start_ms, end_ms).items()}
    if not ranges:  # no such topic yet: nothing to read, as Spark's own read of it gave
        return spark.createDataFrame([], "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                                     "timestamp TIMESTAMP, timestampType INT")  # fmt: skip
    return (
        spark.read.format("kafka")
        .options(**spark_options(client_properties(settings())))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", json.dumps({topic: {str(p): fl[0] for p, fl in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): fl[1] for p, fl in ranges.items()}}))
        .load()
        .where(
            (F.col("timestamp") >= F.timestamp_millis(F.lit(start_ms)))
            & (F.col("timestamp") < F.timestamp_millis(F.lit(end_ms)))
        )
    )


# ------------------------------------------------------------------ reading history by arrival time

#: One record read back from Kafka: (timestamp ms, topic, partition, offset, key, value, headers).
Record = tuple[int, str, int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]


def read_by_time(bootstrap: str, topics: list[str], start_ms: int, end_ms: int) -> list[Record]:
    """Every record of ``topics`` (all partitions) whose record timestamp is in ``[start_ms,
    end_ms)``, ordered by (timestamp, topic, partition, offset): the order they arrived in.

    Each partition is read over its :func:`range_offsets`, keeping the records stamped inside the range.
    """
    out: list[Record] = []
    with consumer(bootstrap, timeout_ms=REQUEST_TIMEOUT_MS, client_id="joinshift-replay-as-live") as c:
        tps = []
        for topic in topics:
            found = partitions(c, topic)
            if not found:
                raise RuntimeError(f"topic {topic!r} does not exist on {bootstrap}")
            tps += found
        todo = {tp: fl for tp, fl in range_offsets(c, tps, start_ms, end_ms).items() if fl[0] < fl[1]}
        if not todo:
            return out
        c.assign(list(todo))
        for tp, (first, _) in todo.items():
            c.seek(tp, first)
        while todo:
            polled = c.poll(timeout_ms=REQUEST_TIMEOUT_MS, max_records=10_000)
            if not polled:
                raise RuntimeError(f"no records from {sorted(str(tp) for tp in todo)} within {REQUEST_TIMEOUT_MS} ms")
            for tp, recs in polled.items():
                if tp not in todo:
                    continue
                stop_at = todo[tp][1]
                for r in recs:
                    if r.offset >= stop_at:
                        break
                    if start_ms <= r.timestamp < end_ms:
                        out.append(
                            (r.timestamp, tp.topic, tp.partition, r.offset, r.key, r.value, list(r.headers or []))
                        )
                if c.position(tp) >= stop_at:
                    del todo[tp]
                    c.pause(tp)
    out.sort(key=lambda r: r[:4])
    return out


def time_span(bootstrap: str, topics: list[str]) -> tuple[int, int] | None:
    """(earliest, latest) record timestamp (ms) of ``topics``' partitions' ends; None if empty."""
    from kafka import TopicPartition

    stamps: list[int] = []
    with consumer(bootstrap, timeout_ms=REQUEST_TIMEOUT_MS, client_id="joinshift-replay-as-live") as c:
        tps = [tp for t in topics for tp in partitions(c, t)]
        begins, ends = c.beginning_offsets(tps), c.end_offsets(tps)
        for tp in tps:
            for off in {begins[tp], ends[tp] - 1} if ends[tp] > begins[tp] else ():
                c.assign([TopicPartition(tp.topic, tp.partition)])
                c.seek(tp, off)
                recs = c.poll(timeout_ms=REQUEST_TIMEOUT_MS, max_records=1).get(tp, [])
                stamps += [r.timestamp for r in recs]
    return (min(stamps), max(stamps)) if stamps else None
