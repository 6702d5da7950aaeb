"""Checkpoint inspection on a REAL checkpoint: the streaming join runs once (availableNow) over a
handful of records in a real Kafka broker, then we read its checkpoint, its lag and its state,
break copies of it, and back it up.

The module builds one checkpoint (one tiny Spark run) under its own storage root and topics, so it
never collides with other tests or with the project's own data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import socket
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer

from jobs.operate import checkpoint as ckpt
from jobs.operate.checkpoint import backup_checkpoint, inspect_checkpoint
from jobs.operate.checkpoint_validate import validate_checkpoint
from jobs.steps.stream import start_streaming_join
from jobs.storage.kafka import create_topic
from jobs.storage.progress import JOIN_QUERY, settle_log
from jobs.storage.tables import Tables

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 20, 10, 15, 30, 123000, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def publish(bootstrap: str, topic: str, records: list[dict], arrival_delay=timedelta(seconds=2)) -> None:
    """JSON records keyed by session, Kafka timestamp = event time + a small arrival delay."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = []
        for r in records:
            ts = datetime.fromisoformat(r["event_time"].replace("Z", "+00:00")) + arrival_delay
            futures.append(
                producer.send(
                    topic,
                    key=r["session_id"].encode(),
                    value=json.dumps(r).encode(),
                    timestamp_ms=int(ts.timestamp() * 1000),
                )
            )
        producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close()


def responses(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "event_id": f"L{i}",
            "session_id": f"s{i % 3}",
            "event_time": iso(T0 + timedelta(minutes=i)),
            "query": f"q{i}",
            "result_count": 10 + i,
        }
        for i in range(start, start + n)
    ]


def clicks(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "event_id": f"R{i}",
            "session_id": f"s{i % 3}",
            "event_time": iso(T0 + timedelta(minutes=i, seconds=20)),
            "action": "click",
            "position": i % 5,
        }
        for i in range(start, start + n)
    ]


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def run(spark, kafka, demo_spec, test_settings, tmp_path_factory):
    """One real streaming-join run: unique topics and storage root; returns what the tests need."""
    tag = uuid.uuid4().hex[:8]
    demo_spec = demo_spec.model_copy(
        update={
            "left": demo_spec.left.model_copy(update={"topic": f"ckpt_{tag}_responses"}),
            "right": demo_spec.right.model_copy(update={"topic": f"ckpt_{tag}_clicks"}),
        }
    )
    root = tmp_path_factory.mktemp("ckpt_inspect")
    s = dataclasses.replace(test_settings, storage_root=str(root / "storage"))
    for topic in (demo_spec.left.topic, demo_spec.right.topic):
        create_topic(kafka, topic, partitions=2)
    publish(kafka, demo_spec.left.topic, responses(4))
    publish(kafka, demo_spec.right.topic, clicks(5))

    # the session's own shuffle partitions (its batch jobs') are not the state's (the spec's 2, which
    # the checkpoint records, asserted below) and are back once the query has started
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    try:
        (query,) = start_streaming_join(spark, demo_spec, bootstrap=kafka, s=s, available_now=True, quarantine=False)
        assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    try:
        assert query.awaitTermination(timeout=600), "availableNow run did not finish in 10 minutes"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()
    settle_log(Tables.of(demo_spec, s).progress_log(JOIN_QUERY), query)

    spec_file = root / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(demo_spec.model_dump(mode="json", by_alias=True), sort_keys=False))
    return {
        "spec": demo_spec,
        "settings": s,
        "checkpoint": Path(Tables.of(demo_spec, s).checkpoint("stream_join")),
        "spec_file": str(spec_file),
        "root": root,
    }


def test_inspect_reports_batches_offsets_lag_and_state(spark, kafka, run):
    cp, spec = run["checkpoint"], run["spec"]
    before = tree_digest(cp)
    info = inspect_checkpoint(spark, cp, kafka, spec=spec)
    assert tree_digest(cp) == before  # inspecting (state reads included) writes nothing

    assert info["exists"] and info["health"]["ok"], info["health"]
    assert info["last_committed_batch"] is not None and info["last_committed_batch"] >= 0
    assert info["last_planned_batch"] == info["last_committed_batch"]  # the run ended cleanly
    assert info["query_id"] == json.loads((cp / "metadata").read_text())["id"]
    assert info["shuffle_partitions"] == "2"

    # every record was read: the committed offsets are the topics' end offsets, lag 0
    kafka_info = info["kafka"]
    assert kafka_info["status"] == "ok"
    assert info["committed_offsets"] == kafka_info["end_offsets"]
    assert sum(info["committed_offsets"][spec.left.topic].values()) == 4
    assert sum(info["committed_offsets"][spec.right.topic].values()) == 5
    assert kafka_info["lag"]["total"] == 0
    assert set(kafka_info["lag"]["per_partition"]) == {spec.left.topic, spec.right.topic}

    # the window is buffered: every click (right watermark 2h) and every response (window upper
    # +30m) is still in state
    state = info["state"]
    assert state["status"] == "ok", state
    assert state["right"]["rows"] == 5
    assert state["left"]["rows"] == 4
    for side in ("left", "right"):
        assert state[side]["json_bytes"] > 0 and state[side]["disk_bytes"] > 0
    assert any("join" in str(op["operatorName"]).lower() for op in state["operators"])
    assert "octet_length(to_json(key))" in state["measured"]
    assert "lag 0" in ckpt.render_inspection(info)

    # three more records arrive: the checkpoint is now 3 behind
    publish(kafka, spec.right.topic, clicks(3, start=100))
    later = inspect_checkpoint(None, cp, kafka, spec=spec)  # no Spark: state skipped, lag still known
    assert later["kafka"]["lag"]["total"] == 3
    assert sum(later["kafka"]["lag"]["per_partition"][spec.right.topic].values()) == 3
    assert sum(later["kafka"]["lag"]["per_partition"][spec.left.topic].values()) == 0
    assert later["state"]["status"] == "skipped"


def test_inspect_with_the_broker_down_says_lag_unknown(run):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    info = inspect_checkpoint(None, run["checkpoint"], f"127.0.0.1:{port}", spec=run["spec"], kafka_timeout_ms=1500)
    assert info["kafka"]["status"] == "unreachable" and info["kafka"]["lag"] == "unknown"
    assert info["last_committed_batch"] >= 0 and info["committed_offsets"]
    assert "lag                   unknown" in ckpt.render_inspection(info)
    assert info["state_store"] == "rocksdb"  # the spec's default, as the offset log records it
    assert "state store           rocksdb (2 partitions)" in ckpt.render_inspection(info)


def test_healthy_checkpoint_validates_and_a_foreign_one_does_not(run):
    cp, spec = run["checkpoint"], run["spec"]
    health = validate_checkpoint(cp, spec=spec)
    assert health.ok and not health.errors, health.render()
    assert health.last_committed_batch >= 0 and health.query_id

    other = spec.model_copy(update={"left": spec.left.model_copy(update={"topic": "some_other_topic"})})
    foreign = validate_checkpoint(cp, spec=other)
    assert not foreign.ok and "incompatible_topics" in foreign.codes()
    assert any("some_other_topic" in i.message and "joinshift replay" in i.message for i in foreign.errors)

    replaced = validate_checkpoint(cp, spec=spec, expected_query_id="00000000-0000-0000-0000-000000000000")
    assert "query_id_mismatch" in replaced.codes() and not replaced.ok

    repartitioned = spec.model_copy(update={"streaming": spec.streaming.model_copy(update={"shuffle_partitions": 8})})
    warned = validate_checkpoint(cp, spec=repartitioned)
    assert warned.ok and "shuffle_partitions_fixed" in warned.codes()

    missing = validate_checkpoint(cp.parent / "never_started", spec=spec)
    assert missing.ok and not missing.exists and "no_checkpoint" in missing.codes()


def _broken_copy(run, break_it) -> Path:
    copy = backup_checkpoint(run["checkpoint"])
    break_it(copy)
    return copy


def test_broken_checkpoints_are_reported_with_the_replay_path(run):
    cp, spec = run["checkpoint"], run["spec"]
    before = tree_digest(cp)
    last = max(int(p.name) for p in (cp / "offsets").iterdir() if p.name.isdigit())

    def truncate_latest_offsets(c: Path):
        f = c / "offsets" / str(last)
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])

    def drop_metadata(c: Path):
        (c / "metadata").unlink()

    def commit_without_offsets(c: Path):
        (c / "offsets" / str(last)).unlink()

    def drop_state(c: Path):
        import shutil

        shutil.rmtree(c / "state")

    def garble_commit(c: Path):
        (c / "commits" / str(last)).write_text('v1\n{"nextBatchWatermarkMs":')

    cases = {
        "corrupt_offsets": (truncate_latest_offsets, f"offsets/{last}"),
        "missing_metadata": (drop_metadata, "metadata"),
        "commit_without_offsets": (commit_without_offsets, f"batch(es) {last}"),
        "missing_state": (drop_state, "state"),
        "corrupt_commit": (garble_commit, f"commits/{last}"),
    }
    for code, (break_it, where) in cases.items():
        broken = _broken_copy(run, break_it)
        health = validate_checkpoint(broken, spec=spec)
        assert not health.ok, f"{code}: {health.render()}"
        assert code in health.codes(), f"{code}: {health.render()}"
        issue = next(i for i in health.errors if i.code == code)
        assert where in issue.message, issue.message
        assert "joinshift replay --spec" in issue.message and "--cutover <T>" in issue.message
        assert broken.exists()  # nothing is ever deleted by validate

    assert tree_digest(cp) == before  # the original never changed


def test_backup_copies_everything_and_leaves_the_original(run):
    cp = run["checkpoint"]
    before = tree_digest(cp)
    first = backup_checkpoint(cp)
    second = backup_checkpoint(cp)
    assert first != second and first.exists() and second.exists()
    for b in (first, second):
        assert b.parent == cp.parent and re.fullmatch(rf"{cp.name}\.bak-\d{{8}}T\d{{6}}Z(-\d+)?", b.name), b.name
    assert tree_digest(first) == before == tree_digest(cp)
    assert validate_checkpoint(first, spec=run["spec"]).ok
    with pytest.raises(ckpt.CheckpointError):
        backup_checkpoint(cp.parent / "does_not_exist")


def test_cli_validate_backup_and_inspect(spark, run, capsys, monkeypatch, tmp_path):
    from jobs.cli import main

    def checkpoint_cli(argv: list[str]) -> int:  # `joinshift checkpoint ...`
        return main(["checkpoint", *argv])

    cp, spec_file = run["checkpoint"], run["spec_file"]
    assert checkpoint_cli(["validate", "--spec", spec_file, "--checkpoint", str(cp)]) == 0
    assert "OK" in capsys.readouterr().out
    assert checkpoint_cli(["validate", "--spec", spec_file, "--checkpoint", spec_file]) == 1  # a file: no "OK"
    assert "is a file, not a checkpoint folder" in capsys.readouterr().out

    broken = _broken_copy(run, lambda c: (c / "metadata").unlink())
    assert checkpoint_cli(["validate", "--spec", spec_file, "--checkpoint", str(broken), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and any(i["code"] == "missing_metadata" for i in out["issues"])

    assert checkpoint_cli(["backup", "--spec", spec_file, "--checkpoint", str(cp), "--json"]) == 0
    assert Path(json.loads(capsys.readouterr().out)["backup"]).is_dir()

    # no broker known (no embedded one, no JOINSHIFT_KAFKA_BOOTSTRAP): inspect still works, lag "unknown"
    from jobs.settings import settings

    monkeypatch.setenv("JOINSHIFT_KAFKA_HOME", str(tmp_path / "no-kafka"))
    monkeypatch.delenv("JOINSHIFT_KAFKA_BOOTSTRAP", raising=False)
    settings.cache_clear()
    try:
        assert checkpoint_cli(["inspect", "--spec", spec_file, "--checkpoint", str(cp), "--json"]) == 0
    finally:
        monkeypatch.undo()
        settings.cache_clear()
    info = json.loads(capsys.readouterr().out)
    assert info["kafka"]["lag"] == "unknown" and "joinshift kafka start" in info["kafka"]["reason"]
    assert info["state"]["status"] == "ok" and info["state"]["right"]["rows"] == 5
