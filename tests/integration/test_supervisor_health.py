"""The supervisor's health classification against a real broker and a real process: a stream
process restarted with everything already read runs no micro-batch, and is idle, not stalled;
once a record waits, the same silence is a stall. Lag comes from Kafka (kafka-python 3 client)."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaProducer

pytestmark = pytest.mark.integration


def _progress(spec, ends: dict[str, dict[int, int]], at: float) -> dict:
    """A join-query progress line whose sources have read up to ``ends``."""
    return {
        "name": "stream_join",
        "batchId": 7,
        "timestamp": datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "durationMs": {"triggerExecution": 1000},
        "stateOperators": [],
        "eventTime": {},
        "sources": [
            {
                "description": f"KafkaV2[Subscribe[{t}]]",
                "numInputRows": 0,
                "endOffset": {t: {str(p): o for p, o in parts.items()}},
            }
            for t, parts in ends.items()
        ],
    }


def test_restarted_with_nothing_to_read_is_idle_and_a_waiting_record_makes_it_stalled(
    kafka, own_pipeline_spec, test_settings
):
    from jobs.operate.health import health
    from jobs.operate.process import StreamProcess
    from jobs.spec import write_spec
    from jobs.storage.kafka import create_topic, end_offsets
    from jobs.storage.progress import JOIN_QUERY
    from jobs.storage.tables import Tables

    name = "health"
    hs = own_pipeline_spec(name)
    for st in (hs.left, hs.right):
        create_topic(kafka, st.topic)
    producer = KafkaProducer(bootstrap_servers=kafka)
    for i in range(3):
        producer.send(hs.left.topic, value=json.dumps({"i": i}).encode())
    producer.flush()

    now = time.time()
    log = Tables.of(hs, test_settings).progress_log(JOIN_QUERY)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(
        json.dumps(_progress(hs, end_offsets(kafka, [hs.left.topic, hs.right.topic]), now - 2000)) + "\n"
    )

    class Sleeper(StreamProcess):  # a real, live process standing in for the restarted job
        def command(self):
            return [sys.executable, "-c", "import time; time.sleep(120)"]

    proc = Sleeper(write_spec(hs, Path(test_settings.storage_root) / name / "spec.yaml"), hs, test_settings)
    proc.start()
    try:
        proc.started_at = now - 1000  # restarted after that progress line, silent ever since
        idle = health(hs, test_settings, now=now, stall_after_s=60, process=proc, bootstrap=kafka)
        assert idle.lag == {"left": 0, "right": 0}, idle.reason
        assert idle.state == "running" and "nothing to read" in idle.reason

        producer.send(hs.right.topic, value=b"{}")
        producer.flush()
        stalled = health(hs, test_settings, now=now, stall_after_s=60, process=proc, bootstrap=kafka)
        assert stalled.lag == {"left": 0, "right": 1}
        assert stalled.state == "stalled"
    finally:
        proc.stop()

    class Busy(StreamProcess):  # inside a long micro-batch: the first after an outage reads the backlog
        def command(self):
            return [sys.executable, "-c", "import time\nend = time.time() + 120\nwhile time.time() < end: pass"]

    busy = Busy(write_spec(hs, Path(test_settings.storage_root) / name / "spec.yaml"), hs, test_settings)
    busy.start()
    try:
        busy.started_at = now - 1000
        working = health(hs, test_settings, now=now, stall_after_s=120, process=busy, bootstrap=kafka)
        assert working.state == "starting" and "a micro-batch in progress" in working.reason, working.reason
        # ... for at most BUSY_STALL_FACTOR x max_batch_age: a runaway batch is a stall too
        runaway = health(hs, test_settings, now=now, stall_after_s=60, process=busy, bootstrap=kafka)
        assert runaway.state == "stalled", runaway.reason
        # after a micro-batch of its own (the progress line after its start), the same
        Path(log).write_text(json.dumps(_progress(hs, {hs.left.topic: {0: 0}}, now - 500)) + "\n")
        working = health(hs, test_settings, now=now, stall_after_s=120, process=busy, bootstrap=kafka)
        assert working.state == "running" and "a micro-batch in progress" in working.reason, working.reason
    finally:
        producer.close()
        busy.stop()
