"""Chaos: the supervised stream process is SIGKILLed at random moments (seeded), stopped once
by the supervisor (SIGTERM: it ends between micro-batches), and the Kafka broker is stopped and
started under it; the supervisor restarts it from its checkpoint each time,
and the Delta output must equal one uninterrupted availableNow run exactly (nothing lost, nothing
duplicated)."""

from __future__ import annotations

import dataclasses
import os

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

#: SIGKILLs per run (the broker-bounce test's second is the supervisor's stop, SIGTERM, instead):
#: each costs a fresh Spark JVM and its first micro-batch, 20-30 s from the kill
#: to new output on an idle 2-core machine (measured). 3 in `make test` (with 5 it measured 20:08, over the budget);
#: `python -m bench.chaos --kills 20` is the long run.
KILLS = int(os.environ.get("JOINSHIFT_CHAOS_KILLS", "3"))


def _supervised(test_settings, test_root, name: str):
    """The supervised stream process's settings: a storage root of its own and, as a separate JVM
    killed every few seconds, a small heap (its JIT stops at C1, as for every process the tests
    start: ``tests/conftest.py``, 0.76x the CPU for the broker-bounce test)."""
    return dataclasses.replace(
        test_settings, storage_root=str(test_root / name / "supervised"), spark_driver_memory="1g"
    )


def _killed_left_no_scratch(res) -> None:
    """A SIGKILL skips Spark's clean-up of its local dirs (its state's working copy, the jars it
    copies, 58-85 MB here): the next driver to start removes a killed one's scratch folder."""
    from jobs.storage.processes import tag_alive
    from jobs.storage.scratch import scratch_root

    killed = {str(pid) for pid in res["killed_pids"]}
    left = sorted(p.name for p in scratch_root().iterdir() if p.name.split("-")[0] in killed and not tag_alive(p.name))
    assert len(killed) == res["kills"] - len(res["stopped"]) and not left, (
        f"scratch folders of killed stream processes were left: {left}"
    )


def test_sigkills_and_a_broker_bounce_neither_lose_nor_duplicate(spark, kafka, demo_spec, test_settings, test_root):
    """Short watermarks, so the run drops late rows: the output must equal a run with the same
    micro-batches, drops included, which a lost, repeated or re-cut batch would change. (With
    watermarks wide enough to drop nothing, any batching gives the same output and a restart can
    only lose or duplicate; that is the weaker check, and ``python -m bench.chaos`` runs it with 20
    kills.)"""
    from jobs.local.chaos import (
        SHORT_WATERMARKS,
        chaos_run,
        dropped_as_late,
        isolated_spec,
        output_rows,
        publish_workload,
        reference_output,
    )
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.operate.health import health_log, load_health_table
    from jobs.spec import write_spec
    from jobs.storage.tables import Tables

    name = "chaos_short"
    # ~15 micro-batches for 200 left / ~290 right events
    ch = isolated_spec(demo_spec, name, max_offsets=20, watermarks=SHORT_WATERMARKS)
    publish_workload(demo_spec, ch, kafka, left_events=200, seed=7)

    reference = dataclasses.replace(test_settings, storage_root=str(test_root / name / "reference"))
    # the same micro-batches as the supervised run, uninterrupted
    expected = reference_output(spark, ch, kafka, reference)
    assert len(expected) > 100
    assert dropped_as_late(ch, reference) > 0  # late rows really are dropped (and counted)

    run = _supervised(test_settings, test_root, name)
    spec_path = write_spec(ch, test_root / name / "chaos.yaml")
    res = chaos_run(
        ch,
        spec_path,
        run,
        kafka,
        kills=KILLS,
        seed=2026,
        broker=EmbeddedKafka(test_settings),
        broker_bounce_after=max(1, KILLS - 2),
        stops_at=(2,),  # the supervisor's stop (SIGTERM) in between: the stream ends between micro-batches
        backoff_s=(0.5, 1),
        log=lambda m: print(m, flush=True),
    )
    print({k: v for k, v in res.items() if k != "report"})

    got = output_rows(spark, ch, run)
    # the workload itself delivers a few events twice (the reference has those pairs twice too):
    # a restart must not add any duplicate beyond them
    assert len(got) - len(set(got)) == len(expected) - len(set(expected)), "duplicated output rows"
    assert got == expected, (
        f"{len(set(expected) - set(got))} rows lost, {len(set(got) - set(expected))} extra"
    )  # the same late rows dropped
    assert res["broker_bounced"]
    assert res["kills"] >= min(KILLS, 3), "the input drained before the chaos was done: make the workload bigger"
    assert res["restarts"] >= res["kills"], res["restart_reasons"]
    assert all(r.startswith(("exited", "stalled", "not running")) for r in res["restart_reasons"])
    assert res["stopped"] == (["stopped"] if res["kills"] >= 2 else []), "the stop ran into the SIGKILL"
    assert res["final_stop"] == "stopped", "the last stop ran into the SIGKILL"
    _killed_left_no_scratch(res)

    # health samples: JSON lines by the supervisor, copied idempotently into Delta
    assert health_log(ch, run).exists()
    n = load_health_table(spark, ch, run)
    assert load_health_table(spark, ch, run) == n  # a reload replaces, never duplicates
    table = spark.read.format("delta").load(Tables.of(ch, run)._t("stream_health"))
    assert (
        table.count()
        == table.select("sampled_at").distinct().count()
        == len({line for line in health_log(ch, run).read_text().splitlines()})
    )
    assert table.where("state = 'exited'").count() >= 1


def test_the_paced_engine_with_late_corrections_survives_sigkills(spark, kafka, demo_spec, test_settings, test_root):
    """The paper's operator under the supervisor: SIGKILLs at random moments, each restart from the
    checkpoint (both topics' offsets and PTs in the offset log, the source's estimators and the
    state dictionaries beside it); its output, corrections merged in, must equal one uninterrupted
    run's. Its micro-batches are cut by pacing, so a re-cut batch would change which rows close late."""
    from jobs.local.chaos import chaos_run, output_rows, paced_corrections_spec, publish_workload, reference_output
    from jobs.spec import write_spec
    from jobs.storage.tables import Tables

    name = "chaos_paced"
    ch = paced_corrections_spec(demo_spec, name)
    publish_workload(demo_spec, ch, kafka, left_events=300, seed=11)

    reference = dataclasses.replace(test_settings, storage_root=str(test_root / name / "reference"))
    expected = reference_output(spark, ch, kafka, reference)
    assert len(expected) > 300
    amended = spark.read.format("delta").load(Tables.of(ch, reference).output("stream")).where("revision > 0")
    n_amended = amended.count()
    print(f"reference: {len(expected)} rows, {n_amended} of them corrections")
    assert n_amended > 0  # corrections happen, and must survive the kills

    run = _supervised(test_settings, test_root, name)
    res = chaos_run(
        ch,
        write_spec(ch, test_root / name / "chaos.yaml"),
        run,
        kafka,
        kills=2,
        seed=14,
        backoff_s=(0.5, 1),
        log=lambda m: print(m, flush=True),
    )
    print({k: v for k, v in res.items() if k != "report"})
    got = output_rows(spark, ch, run)
    assert len(got) == len(set(got)), "duplicated output rows"
    assert got == expected, f"{len(set(expected) - set(got))} rows lost, {len(set(got) - set(expected))} extra"
    assert res["kills"] == 2 and res["restarts"] >= 2, res["restart_reasons"]
    _killed_left_no_scratch(res)
