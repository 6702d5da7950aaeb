"""The continuous join of one pipeline as its own OS process: start, adopt by pid file, stop.

The process is ``joinshift stream --spec SPEC`` (``python -m jobs.cli stream``) in its own session,
so killing its process group takes its Spark JVM along; a pid file under
``Settings.local_path("supervisor", <pipeline>, "stream.pid")`` (under the storage root when that
is local; always on this machine's disk) lets the next supervisor (the next Airflow
run) find the process the previous one started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.settings import EXIT_FILE_ENV, PROJECT_ROOT, Settings, settings, settings_env
from jobs.spec import JoinSpec, load_spec
from jobs.storage.hold import supervised_stream_pid, supervisor_dir
from jobs.storage.processes import cmdline, describe, pid_alive, process_tree, wait_gone

log = logging.getLogger("joinshift.supervisor")

#: What identifies a stream process on its command line.
STREAM_COMMAND = ("-m", "jobs.cli", "stream")


def _is_stream_process(pid: int | None) -> bool:
    cmd = cmdline(pid) if isinstance(pid, int) and pid_alive(pid) else ""
    return " ".join(STREAM_COMMAND) in cmd


def _claimant() -> list[int]:
    """Who claims a restart: this process and thread (a sensor's pokes in one worker are one)."""
    return [os.getpid(), threading.get_ident()]


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def running_stream_pid(spec: JoinSpec, s: Settings | None = None) -> int | None:
    """The pipeline's supervised stream process (its pid file), if it runs: a pid reused since by
    another process is not it."""
    pid = supervised_stream_pid(spec, s)
    return pid if _is_stream_process(pid) else None


def stop_stream_process(spec: JoinSpec, s: Settings | None = None) -> int | None:
    """Stop the pipeline's supervised stream process, whatever spec file it was started with
    (found by its pid file); returns the pid stopped, or None if none ran."""
    try:
        rec = json.loads((supervisor_dir(spec, s) / "stream.pid").read_text())
    except (OSError, ValueError):
        return None
    pid = rec.get("pid")
    if not _is_stream_process(pid):
        return None
    proc = StreamProcess(rec["cmd"][rec["cmd"].index("--spec") + 1], spec, s)
    proc.pid, proc.started_at = pid, rec.get("started_at")
    ended = proc.stop()
    log.info("stream process %s of %s: %s", pid, spec.pipeline, ended)
    return pid


# ------------------------------------------------------------------ the stream process


#: What ``joinshift`` exits with when it refuses its spec, settings or arguments
#: (``jobs.commands.EXIT_USAGE``; a test holds the two equal): restarting gets the same answer.
EXIT_REFUSED = 2


class StreamProcess:
    """The continuous join of one pipeline as a separate, detached process.

    ``start()`` spawns ``python -m jobs.cli stream --spec SPEC --trigger-interval T`` in its own
    session (so killing it takes its Spark JVM along: the whole process group), with the
    environment inherited plus ``JOINSHIFT_*`` for ``s``, output appended to
    ``<log_dir>/stream_join_<pipeline>.log``; a pid file records it for later supervisors.
    """

    def __init__(
        self,
        spec_path: str | Path,
        spec: JoinSpec | None = None,
        s: Settings | None = None,
        *,
        trigger_interval: str | None = None,
        env: dict[str, str] | None = None,
    ):
        self.spec_path = str(Path(spec_path).resolve())
        self.spec = spec or load_spec(self.spec_path)
        self.s = s or settings()
        self.trigger_interval = trigger_interval
        self.extra_env = env or {}
        self.dir = supervisor_dir(self.spec, self.s)
        self.pid_file = self.dir / "stream.pid"
        self.exit_file = self.dir / "stream.exit"
        self.claim_file = self.dir / "restart.claim"  # who restarts the stream that failed (claim_restart)
        self.log_file = Path(self.s.log_dir) / f"stream_join_{self.spec.pipeline}.log"
        self._proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.started_at: float | None = None
        #: whether the last ``start()`` adopted a process another supervisor had just started
        self.adopted = False

    def command(self) -> list[str]:
        cmd = [sys.executable, *STREAM_COMMAND, "--spec", self.spec_path]
        if self.trigger_interval:
            cmd += ["--trigger-interval", self.trigger_interval]
        return cmd

    def _record(self) -> dict[str, Any]:
        try:
            return json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return {}

    def find(self) -> bool:
        """Adopt the process a previous supervisor started (pid file), if it still runs: the pid
        file is the pipeline's, so whatever spec file started it (Airflow's path, the CLI's)."""
        rec = self._record()
        pid = rec.get("pid")
        if _is_stream_process(pid):
            self.pid, self.started_at = pid, rec.get("started_at")
            return True
        return False

    @contextlib.contextmanager
    def _spawning(self) -> Iterator[None]:
        """Held from looking at the pid file to writing it: two supervisors (a CLI watch and a
        sensor's poke, two pokes) that both found no process must not both start one on the same
        checkpoint. An OS lock, so a supervisor that dies holding it releases it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "spawn.lock", "a") as lock:  # not stream.lock: the running stream holds that
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def claim_restart(self, backoff_s: float) -> bool:
        """Whether this supervisor restarts the process the pid file names, which exited or stalled:
        of two supervisors that saw it fail (a CLI watch and a sensor's poke), the first to ask
        alerts and restarts it, the other leaves it to that one and adopts what it starts. A claim is
        a process's and thread's (a sensor's pokes in one worker are one claimant); it ends when its
        claimant started the stream or gave up (:meth:`release_restart`), with its claimant's
        process, or a minute after its backoff (a claimant that hung)."""
        me = _claimant()
        with self._spawning():
            rec = self._record()
            if rec.get("pid") != self.pid and _is_stream_process(rec.get("pid")):
                return False  # not the process this one saw fail: another supervisor's restart runs
            failed = [rec.get("pid"), rec.get("started_at")]
            try:
                claim = json.loads(self.claim_file.read_text())
            except (OSError, ValueError):
                claim = {}
            by = claim.get("by") or [None, None]
            # no pid file: the claimant stopped the stalled process (and removed it) for its restart
            same = claim.get("of") == failed or failed == [None, None]
            if same and by != me and pid_alive(by[0]) and time.time() < claim.get("until", 0):
                return False
            self.claim_file.write_text(json.dumps({"of": failed, "by": me, "until": time.time() + backoff_s + 60}))
            return True

    def release_restart(self) -> None:
        """End this supervisor's claim: its restart is done (the pid file names the new process), or
        abandoned (the others may restart it)."""
        with self._spawning(), contextlib.suppress(OSError, ValueError):
            if json.loads(self.claim_file.read_text()).get("by") == _claimant():
                self.claim_file.unlink()

    def start(self) -> int:
        """Start the process, or adopt the one another supervisor started since this one looked
        (``adopted``); returns its pid."""
        self.adopted = False
        if self.alive():
            return self.pid  # type: ignore[return-value]
        with self._spawning():
            if self.find():  # a second stream on the checkpoint would only be refused
                self.adopted = True
                log.info("stream process %s of %s was started by another supervisor", self.pid, self.spec.pipeline)
                return self.pid  # type: ignore[return-value]
            return self._spawn()

    def _spawn(self) -> int:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **settings_env(self.s), **self.extra_env, EXIT_FILE_ENV: str(self.exit_file)}
        with contextlib.suppress(FileNotFoundError):
            self.exit_file.unlink()  # the last process's
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        with open(self.log_file, "ab") as out:
            out.write(f"\n=== {_stamp()} start: {' '.join(self.command())}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                self.command(),
                cwd=str(PROJECT_ROOT),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid, self.started_at = self._proc.pid, time.time()
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {"pid": self.pid, "started_at": self.started_at, "cmd": self.command(), "log": str(self.log_file)}
            )
            + "\n"
        )
        tmp.replace(self.pid_file)
        log.info("started stream process %s for %s (log %s)", self.pid, self.spec.pipeline, self.log_file)
        return self.pid

    def alive(self) -> bool:
        if self._proc is not None and self._proc.pid == self.pid:
            return self._proc.poll() is None
        return pid_alive(self.pid)

    def returncode(self) -> int | None:
        """How the process ended: its exit status when this object started it; else, once the pid
        file's process is gone, the status it wrote as it ended (:data:`EXIT_FILE_ENV`). None while
        it runs, or when it could not say (killed)."""
        if self._proc is not None and self._proc.pid == self.pid:
            return self._proc.poll()
        pid = self.pid or self._record().get("pid")
        if pid is None or _is_stream_process(pid):  # a pid reused since by another process: it ended
            return None
        try:
            ended = json.loads(self.exit_file.read_text())
        except (OSError, ValueError):
            return None
        return int(ended["exit_code"]) if ended.get("pid") == pid else None

    def last_words(self) -> str:
        """Why the process ended, as it said it in its log: from its last ``joinshift stream:``
        line on (a refused spec names each bad field on a line of its own), joined; or ''."""
        with contextlib.suppress(OSError):
            with open(self.log_file, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
                lines = [x.strip() for x in f.read().decode("utf-8", "replace").splitlines() if x.strip()]
            said = [i for i, x in enumerate(lines) if x.startswith("joinshift ")]
            return "; ".join(lines[said[-1] if said else -1 :]) if lines else ""
        return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the Python driver and its Spark JVM)."""
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if sig == signal.SIGKILL:
            self._reap(5)

    def _reap(self, timeout: float) -> bool:
        end = time.time() + timeout
        while time.time() < end:
            if not self.alive():
                return True
            time.sleep(0.1)
        return not self.alive()

    def stop(self, timeout: float = 20) -> str:
        """SIGTERM to the stream process, which stops its queries between micro-batches, then Spark,
        and exits, its JVM after it; SIGKILL to its process group for whatever is left after
        ``timeout``. Removes the pid file. How it ended: "stopped", "killed" or "not running"."""
        pid, ended = self.pid, "not running"  # this process, even if a supervisor starts the next meanwhile
        if pid is not None and self.alive():
            tree = process_tree(pid)  # it, its JVM and their Python workers, while they are ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
            left = describe(wait_gone(tree, timeout))  # named while they still run
            ended = "killed" if left else "stopped"
            # only here, right after the group was ours: a process found dead may have died long
            # ago, and its pid (the group id) may be another process's now (pids wrap at 32,768)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            if ended == "killed":
                wait_gone(tree, 5)
            if self._proc is not None and self._proc.pid == pid:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(5)  # reaped: no zombie left
            if ended == "killed":
                log.warning("stream process %s did not stop within %ss of SIGTERM; killed: %s", pid, timeout, left)
        with contextlib.suppress(FileNotFoundError):
            if self._record().get("pid") == pid:
                self.pid_file.unlink()
        return ended
