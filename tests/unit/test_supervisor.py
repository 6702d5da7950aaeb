"""Pure pieces of supervision: a progress-log line as a `stream_progress` row."""

from __future__ import annotations

import pytest

from jobs.operate.health import PROGRESS_SCHEMA, progress_row


def _progress() -> dict:
    """The shape Spark 4.2 writes for the join query: two Kafka sources, two de-dup operators and
    the join operator."""
    src = lambda topic, n, rate: {
        "description": f"KafkaV2[Subscribe[{topic}]]",
        "numInputRows": n,  # noqa: E731
        "processedRowsPerSecond": rate,
    }
    op = lambda name, rows, mem, dropped: {
        "operatorName": name,
        "numRowsTotal": rows,  # noqa: E731
        "memoryUsedBytes": mem,
        "numRowsDroppedByWatermark": dropped,
    }
    return {
        "runId": "r1",
        "batchId": 4,
        "timestamp": "2026-11-22T10:00:00.000Z",
        "durationMs": {"triggerExecution": 1800},
        "sources": [src("search_responses", 120, 66.7), src("search_clicks", 170, 94.4)],
        "stateOperators": [
            op("dedupeWithinWatermark", 100, 1000, 1),
            op("dedupeWithinWatermark", 150, 1500, 2),
            op("symmetricHashJoin", 900, 9000, 3),
        ],
        "eventTime": {"watermark": "2026-11-19T10:00:00.000Z"},
    }


def test_a_progress_line_becomes_one_row_with_every_column(demo_spec):
    row = progress_row(demo_spec, _progress())
    assert set(row) == {c.split()[0] for c in PROGRESS_SCHEMA.split(", ")}
    assert row["input_rows_left"] == 120 and row["input_rows_right"] == 170
    assert row["processed_rate_right"] == 94.4
    assert (row["join_state_rows"], row["join_state_memory_bytes"], row["dedup_state_rows"]) == (900, 9000, 250)
    assert (row["dropped_by_watermark_join"], row["dropped_by_watermark"]) == (3, 6)
    assert row["state_memory_bytes"] == 11500 and row["batch_duration_ms"] == 1800


def test_the_paced_engines_operator_is_the_joins_state_not_a_de_duplication(demo_spec):
    p = _progress()
    paced = {**p["stateOperators"][2], "operatorName": "transformWithStateInPandasExec", "numRowsTotal": 700}
    p["stateOperators"] = [paced]
    row = progress_row(demo_spec, p)
    assert (row["join_state_rows"], row["dedup_state_rows"]) == (700, 0)


def test_an_idle_batch_has_zero_inputs_not_missing_ones(demo_spec):
    p = _progress()
    p["sources"] = [{**x, "numInputRows": 0, "processedRowsPerSecond": 0.0} for x in p["sources"]]
    row = progress_row(demo_spec, p)
    assert row["input_rows_left"] == 0 and row["processed_rate_left"] == 0.0


def test_a_sensor_watch_remembers_its_checks_and_a_retry_after_giving_up_starts_over(tmp_path, demo_spec):
    """Pokes of one watch share the report (and backoff); a watch that gave up starts over."""
    import dataclasses
    import json

    from jobs.operate.process import StreamProcess
    from jobs.operate.supervisor import supervise_step
    from jobs.settings import Settings
    from jobs.storage.hold import hold

    s = dataclasses.replace(Settings(), storage_root=str(tmp_path))
    spec = demo_spec.model_copy(update={"pipeline": "watched"})

    class NeverStarted(StreamProcess):  # held below, so never started
        def start(self):
            raise AssertionError("a held pipeline must not be started")

    opts = {"spec_path": tmp_path / "spec.yaml", "watch_s": 3600, "on_alert": None}
    with hold(spec, s, reason="replay"):
        proc = NeverStarted(tmp_path / "spec.yaml", spec, s)
        done, report = supervise_step(spec, s, watch="run-1", process=proc, **opts)
        assert not done and report.checks == 1
        done, report = supervise_step(spec, s, watch="run-1", process=proc, **opts)
        assert report.checks == 2 and report.states == {"held": 2}
        done, report = supervise_step(spec, s, watch="run-2", process=proc, **opts)
        assert report.checks == 1  # a new watch starts its own report
        f = tmp_path / "supervisor" / "watched" / "watch.json"
        saved = json.loads(f.read_text())
        saved["memory"]["report"]["gave_up"] = True
        f.write_text(json.dumps(saved))
        done, report = supervise_step(spec, s, watch="run-2", process=proc, **opts)
        assert report.checks == 1 and not report.gave_up  # the retry starts over
        done, _ = supervise_step(spec, s, watch="run-3", process=proc, **{**opts, "watch_s": 0})
        assert done


#: A stand-in stream process that sleeps a minute; it prints that it is up, and who sent a
#: catchable signal that ends it first, so a failure tells a killed process from one not recognised.
_STAND_IN = """
import signal
sigs = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
print("stand-in: up", flush=True)
got = signal.sigtimedwait(sigs, 60)
if got is not None:
    try:
        sender = open(f"/proc/{got.si_pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    except OSError:
        sender = "(gone)"
    print(f"stand-in: signal {got.si_signo} from pid {got.si_pid}: {sender}", flush=True)
"""


def _pipeline(tmp_path, demo_spec, name: str):
    """Settings under ``tmp_path`` and the demo spec as pipeline ``name``, written to a file."""
    import dataclasses

    from jobs.settings import Settings
    from jobs.spec import write_spec

    s = dataclasses.replace(Settings(), storage_root=str(tmp_path), log_dir=str(tmp_path / "logs"))
    spec = demo_spec.model_copy(update={"pipeline": name})
    return s, spec, write_spec(spec, tmp_path / "spec.yaml")


def _stand_in_process():
    """A stream process whose process is the stand-in (:data:`_STAND_IN`)."""
    import sys

    from jobs.operate.process import STREAM_COMMAND, StreamProcess

    class StandIn(StreamProcess):
        def command(self):
            return [sys.executable, "-c", _STAND_IN, *STREAM_COMMAND, "--spec", self.spec_path]

    return StandIn


def _in_threads(*fns) -> list:
    """Run each of ``fns`` in a thread of its own, all at once (other supervisors: other threads of
    this process), and wait for them; their results, in order."""
    import threading

    out: dict[int, object] = {}
    threads = [threading.Thread(target=lambda i=i, fn=fn: out.update({i: fn()})) for i, fn in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    return [out.get(i) for i in range(len(fns))]


def test_each_poke_adopts_the_process_an_earlier_poke_started(tmp_path, demo_spec):
    """A sensor's poke builds its process handle afresh (no pid): it must adopt the running
    process by its pid file, not take it for exited and start a second one."""
    from jobs.operate.process import stop_stream_process
    from jobs.operate.supervisor import supervise_step
    from jobs.storage.processes import cmdline, pid_alive

    s, spec, path = _pipeline(tmp_path, demo_spec, "poked")
    sleeper = _stand_in_process()
    opts = {"spec_path": path, "watch_s": 3600, "on_alert": None, "bootstrap": "127.0.0.1:1"}
    try:
        starter = sleeper(path, spec, s)
        _, report = supervise_step(spec, s, watch="run-1", process=starter, **opts)
        first = report.pid
        assert pid_alive(first) and len(report.restarts) == 1
        for _ in range(2):
            _, report = supervise_step(spec, s, watch="run-1", process=sleeper(path, spec, s), **opts)
        # on failure: does the first process still run, how does its command line read, who signalled it
        assert report.pid == first and len(report.restarts) == 1, (
            report.restarts,
            f"first alive now: {pid_alive(first)}, its command line: {cmdline(first)!r}",
            starter.log_file.read_text(),
        )
        assert set(report.states) == {"starting"}
    finally:
        stop_stream_process(spec, s)


def test_two_supervisors_that_both_found_no_process_start_one_between_them(tmp_path, demo_spec):
    """A CLI watch and a sensor's poke (or two pokes) that look at the same moment both find no
    stream: one starts it, the other adopts it and records no restart, rather than a second stream
    on the same checkpoint."""
    import threading

    from jobs.operate.process import stop_stream_process
    from jobs.operate.supervisor import Supervisor
    from jobs.spec import write_spec
    from jobs.storage.processes import cmdline, pid_alive

    s, spec, path = _pipeline(tmp_path, demo_spec, "raced")
    both_looked = threading.Barrier(2, timeout=20)

    class Sleeper(_stand_in_process()):
        looked = False

        def find(self):
            found = super().find()
            if not self.looked:  # the supervisor's own look: wait until the other has looked too
                self.looked = True
                both_looked.wait()
            return found

    sups = [Supervisor(spec, s, spec_path=path, process=Sleeper(path, spec, s), on_alert=None) for _ in range(2)]
    try:
        _in_threads(*[sup.ensure_started for sup in sups])
        pids = {sup.proc.pid for sup in sups}
        streams = [p for p in pids if p and pid_alive(p) and str(path.resolve()) in cmdline(p)]
        assert len(pids) == 1 and len(streams) == 1, [(p, pid_alive(p), cmdline(p)) for p in pids]
        assert sorted(len(sup.report.restarts) for sup in sups) == [0, 1]
        assert sorted(sup.proc.adopted for sup in sups) == [False, True]
        # a supervisor given another path to the same pipeline's spec (Airflow's, the CLI's) adopts it too
        other = Sleeper(write_spec(spec, tmp_path / "elsewhere.yaml"), spec, s)
        other.looked = True
        assert other.start() == pids.pop() and other.adopted
    finally:
        for sup in sups:
            sup.proc.stop(timeout=5)
        stop_stream_process(spec, s)


@pytest.mark.parametrize("ended", ["killed", "stopped"])
def test_two_supervisors_that_saw_the_stream_fail_alert_and_restart_it_once(tmp_path, demo_spec, ended):
    """A CLI watch and a sensor's poke that both see the stream exited: one says "restarting in Ns"
    and restarts it; the other says nothing and adopts the process, rather than a second alert for
    one failure (and a restart it does not make). Killed, it leaves its pid file; stopped (as a
    supervisor stops a stalled one before its restart), none."""
    import signal
    import threading

    from jobs.operate.process import stop_stream_process
    from jobs.operate.supervisor import Supervisor
    from jobs.storage.processes import pid_alive

    s, spec, path = _pipeline(tmp_path, demo_spec, "failed-once")
    both_decided = threading.Barrier(2, timeout=20)

    class Sleeper(_stand_in_process()):
        def claim_restart(self, backoff_s):
            both_decided.wait()  # both saw it exited and are about to restart it
            return super().claim_restart(backoff_s)

    first = Sleeper(path, spec, s)
    first.start()
    if ended == "killed":
        first._proc.send_signal(signal.SIGKILL)
        first._proc.wait(5)
    else:
        first.stop(timeout=5)
    assert not first.alive() and first.pid_file.exists() == (ended == "killed")
    alerts: list[tuple[str, str]] = []
    opts = {"spec_path": path, "bootstrap": "127.0.0.1:1", "backoff_s": [1], "on_alert": lambda *a: alerts.append(a)}
    sups = [Supervisor(spec, s, process=Sleeper(path, spec, s), **opts) for _ in range(2)]
    try:
        _in_threads(*[sup.check for sup in sups])
        assert [kind for kind, _ in alerts] == ["restart"], alerts
        assert sorted(len(sup.report.restarts) for sup in sups) == [0, 1]
        for sup in sups:
            sup.check()  # the one that left it adopts what the other started
        pids = {sup.proc.pid for sup in sups}
        assert len(pids) == 1 and pid_alive(pids.pop()) and len(alerts) == 1
    finally:
        for sup in sups:
            sup.proc.stop(timeout=5)
        stop_stream_process(spec, s)


def test_a_restart_claim_holds_while_its_claimant_stops_the_stalled_process_and_ends_when_released(tmp_path, demo_spec):
    """The claimant of a stalled stream's restart stops it first, which removes the pid file: a
    supervisor that looks then must still leave the restart to it. A claimant that abandons its
    restart (stopped during the backoff) releases the claim."""
    import json
    import time

    from jobs.operate.process import StreamProcess

    s, spec, path = _pipeline(tmp_path, demo_spec, "stalled")
    a, b = StreamProcess(path, spec, s), StreamProcess(path, spec, s)
    a.dir.mkdir(parents=True, exist_ok=True)
    a.pid_file.write_text(json.dumps({"pid": 4_000_000, "started_at": time.time()}))  # the stalled one's

    assert a.claim_restart(30)
    a.pid_file.unlink()  # a's stop of the stalled process
    assert _in_threads(lambda: b.claim_restart(30))[0] is False
    a.release_restart()
    assert _in_threads(lambda: b.claim_restart(30))[0] is True


def test_a_supervisor_that_saw_a_failure_another_has_restarted_since_leaves_it_and_a_stopped_one_releases(
    tmp_path, demo_spec
):
    """A supervisor slow to decide (its health look took seconds) must not alert and restart once
    the pid file names a stream another supervisor started meanwhile; and one stopped during its
    backoff leaves no claim behind."""
    import threading

    from jobs.operate.process import stop_stream_process
    from jobs.operate.supervisor import Supervisor

    s, spec, path = _pipeline(tmp_path, demo_spec, "restarted-meanwhile")
    sleeper = _stand_in_process()
    slow = sleeper(path, spec, s)
    slow.pid = 4_000_000  # the process it saw exit
    other = sleeper(path, spec, s)
    try:
        other.start()  # another supervisor's restart
        assert slow.claim_restart(1) is False
        other.stop(timeout=5)
        stop = threading.Event()
        stop.set()
        alerts: list = []
        sup = Supervisor(spec, s, spec_path=path, process=sleeper(path, spec, s), bootstrap="127.0.0.1:1",
                         backoff_s=[30], stop=stop, on_alert=lambda *a: alerts.append(a))  # fmt: skip
        assert sup.check() is False and [k for k, _ in alerts] == ["restart"]
        assert not (sup.proc.dir / "restart.claim").exists()  # released: another may restart it
    finally:
        stop_stream_process(spec, s)


def test_starting_while_another_process_owns_the_checkpoint_does_not_wait_for_it(tmp_path, demo_spec):
    """The spawn lock is not the checkpoint owner's lock: an increment owning the checkpoint for
    minutes must not hold a supervisor's start (the stream it starts refuses, and says so)."""
    import threading

    from jobs.storage.hold import stream_owner

    s, spec, path = _pipeline(tmp_path, demo_spec, "owned")
    sleeper = _stand_in_process()
    proc = sleeper(path, spec, s)
    with stream_owner(spec, s, role="increment"):
        starting = threading.Thread(target=proc.start, daemon=True)
        starting.start()
        starting.join(10)
        assert not starting.is_alive(), "start() waited for the checkpoint owner's lock"
    proc.stop(timeout=5)


def test_stopping_a_process_found_dead_signals_no_group_its_old_pid_may_now_name(tmp_path, demo_spec):
    """Pids wrap: a stream process that died long ago may have left its pid, its group id, to another
    process. ``stop`` then signals nothing (the handle's process is dead; a real process group
    stands in for the one that took the pid)."""
    import dataclasses
    import subprocess
    import sys

    from jobs.operate.process import StreamProcess
    from jobs.settings import Settings
    from jobs.spec import write_spec
    from jobs.storage.processes import pid_alive

    s = dataclasses.replace(Settings(), storage_root=str(tmp_path), log_dir=str(tmp_path / "logs"))
    path = write_spec(demo_spec, tmp_path / "spec.yaml")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:

        class LongDead(StreamProcess):  # its own process is gone; its pid now names `other`'s group
            def alive(self) -> bool:
                return False

        handle = LongDead(path, demo_spec, s)
        handle.pid = other.pid
        handle.stop(timeout=1)
        assert pid_alive(other.pid) and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_process_caught_inside_its_exec_is_still_recognised(monkeypatch):
    """Inside its exec a process reads an empty command line until its new arguments are in place
    (under load for up to a second; a poke then took the supervisor's own stream process for
    another and started a second one): ``cmdline`` reads it again until it has one."""
    import subprocess
    import sys

    import psutil

    from jobs.storage.processes import cmdline

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "jobs.cli", "stream"])
    try:
        real, reads = psutil.Process.cmdline, []

        def mid_exec(self):  # the first reads as inside the exec: no arguments yet
            reads.append(self.pid)
            return [] if len(reads) <= 3 else real(self)

        monkeypatch.setattr(psutil.Process, "cmdline", mid_exec)
        assert cmdline(proc.pid).endswith("-m jobs.cli stream") and len(reads) == 4
        # and one that never gets arguments (a kernel thread that took the pid) is "" in the end
        monkeypatch.setattr(psutil.Process, "cmdline", lambda self: [])
        assert cmdline(proc.pid, settle_s=0.2) == ""
    finally:
        proc.kill()
        proc.wait()


_PARENT_AND_CHILD = """
import signal, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])  # stands in for the stream's JVM, in its process group
def on_term(*_):
    if sys.argv[1] == "in-order":
        child.terminate()
        child.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_stop_waits_for_the_whole_process_group_and_kills_what_outlasts_its_grace(tmp_path, demo_spec):
    """The supervisor's stop sends SIGTERM to the stream process alone and waits for it and its
    JVM; a JVM still running after the grace is SIGKILLed with its group."""
    import sys

    from jobs.local.chaos import wait_until
    from jobs.operate.process import STREAM_COMMAND, StreamProcess
    from jobs.storage.processes import pid_alive

    s, spec, path = _pipeline(tmp_path, demo_spec, "stopped")

    for how, expected in (("in-order", "stopped"), ("leaves-its-child", "killed")):

        class StandIn(StreamProcess):
            def command(self, how=how):
                return [sys.executable, "-c", _PARENT_AND_CHILD, how, *STREAM_COMMAND, "--spec", self.spec_path]

        proc = StandIn(path, spec, s)
        proc.start()
        try:
            assert wait_until(lambda log=proc.log_file: log.read_text().rstrip().split("\n")[-1].isdigit(), 30)
            child = int(proc.log_file.read_text().split()[-1])
            assert child and pid_alive(child)
            assert proc.stop(timeout=3) == expected
            assert not pid_alive(proc.pid) and not pid_alive(child)
            assert not proc.pid_file.exists()
        finally:
            proc.kill()


def test_a_stream_that_refuses_its_spec_is_not_restarted_and_the_alert_says_why(tmp_path, demo_spec):
    """A real ``joinshift stream`` child with a spec it refuses exits 2 at once; restarting it would
    get the same answer, so supervision ends (gave_up, exit 1 from the CLI) with the child's own line
    in the alert. It restarted it every few seconds for the whole watch, the cause only in its log."""
    import dataclasses

    from jobs.commands import EXIT_USAGE
    from jobs.operate.process import EXIT_REFUSED
    from jobs.operate.supervisor import supervise
    from jobs.settings import Settings

    assert EXIT_REFUSED == EXIT_USAGE
    s = dataclasses.replace(Settings(), storage_root=str(tmp_path / "storage"), log_dir=str(tmp_path / "logs"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: [not, a, name]\n")
    spec = demo_spec.model_copy(update={"pipeline": "refused"})
    alerts: list[tuple[str, str]] = []
    report = supervise(
        spec, s, spec_path=bad, checks=60, interval_s=0.5, backoff_s=(0,), on_alert=lambda k, m: alerts.append((k, m))
    )
    assert report.gave_up and [r["reason"] for r in report.restarts] == ["not running"]  # its first start only
    assert [a["kind"] for a in report.alerts] == ["refused"]
    assert alerts and alerts[-1][0] == "refused"
    assert "(exit code 2: joinshift stream: " in alerts[-1][1] and "pipeline" in alerts[-1][1], alerts


def test_a_sensor_poke_learns_the_exit_code_of_a_stream_an_earlier_poke_started(tmp_path, demo_spec):
    """Each poke of the Airflow sensor is a new supervisor; the one that started the stream is gone
    when it exits. The exit code it writes as it ends (refused: 2) still stops the restarts. The
    pokes restarted it until the restart budget ran out, the cause only in its log. (Through
    Airflow, the task then fails without retries: test_restart_dags.)"""
    import dataclasses
    import time

    from jobs.operate.supervisor import supervise_step
    from jobs.settings import Settings

    s = dataclasses.replace(Settings(), storage_root=str(tmp_path / "storage"), log_dir=str(tmp_path / "logs"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: [not, a, name]\n")
    spec = demo_spec.model_copy(update={"pipeline": "refused_in_a_sensor"})
    opts = {"spec_path": bad, "watch_s": 600, "backoff_s": (0,), "on_alert": None}
    report = None
    for _ in range(60):  # a poke every 0.5 s, each with a supervisor (and a process object) of its own
        done, report = supervise_step(spec, s, watch="run-1", **opts)
        if done:
            break
        time.sleep(0.5)
    assert report is not None and report.gave_up, report
    assert [r["reason"] for r in report.restarts] == ["not running"]  # its first start only
    assert [a["kind"] for a in report.alerts] == ["refused"]
    assert "(exit code 2: joinshift stream: " in report.alerts[0]["message"], report.alerts
