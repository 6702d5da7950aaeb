"""Who may use a pipeline's checkpoint.

* The maintenance hold: a file that says "a replay owns this pipeline's checkpoint now". While
  held, supervisors neither start nor restart the stream process, scheduled increments skip, and
  the stream refuses to start. A hold left by a dead process is stale and ignored, unless the
  job under it failed: a replay that failed part-way leaves a half-built checkpoint, which no
  stream may run from (it would write again what the old run wrote). That hold stays, saying
  so, until the same job is run again and finishes.
* The stream owner (:func:`stream_owner`): one process at a time runs the pipeline's stream
  queries, whether the supervised continuous process, an increment (the ``joinshift_stream`` DAG,
  ``joinshift stream --available-now``) or a replay; another is refused. An OS file lock, so
  it is gone with its process: a crash leaves nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.settings import Settings, settings
from jobs.spec import JoinSpec
from jobs.storage.processes import pid_alive, process_tag, tag_alive

log = logging.getLogger("joinshift.hold")


def supervisor_dir(spec: JoinSpec, s: Settings | None = None) -> Path:
    """Where a pipeline's supervision files live (pid file, hold, supervision state, health and
    restart logs). They stay on local disk whatever the storage root (``Settings.local_path``):
    they are about processes of this machine, whose pids only mean something here, and the
    supervisor reads them without a JVM."""
    return (s or settings()).local_path("supervisor", spec.pipeline)


def hold_file(spec: JoinSpec, s: Settings | None = None) -> Path:
    return supervisor_dir(spec, s) / "hold.json"


def current_hold(spec: JoinSpec, s: Settings | None = None) -> dict[str, Any] | None:
    """The hold a maintenance job (a replay) put on the pipeline, if its process still lives or
    the job failed under it (``failed`` says how). A hold left by a process that died without a
    word is stale: it is ignored (and said so in the log)."""
    try:
        rec = json.loads(hold_file(spec, s).read_text())
    except (OSError, ValueError):
        return None
    alive = tag_alive(rec.get("tag", "")) if rec.get("tag") else pid_alive(rec.get("pid"))
    if rec.get("failed") or alive is not False:  # a pid reused since (a container's restart) is not the holder
        return rec
    log.warning(
        "ignoring a stale hold on %s left by dead pid %s (%s)", spec.pipeline, rec.get("pid"), rec.get("reason")
    )
    return None


def describe_hold(held: dict[str, Any]) -> str:
    """One phrase for messages: who holds the pipeline, or which job failed under its hold."""
    if held.get("failed"):
        return (
            f"left held by a job that failed ({held.get('reason')}, since {held.get('since')}: {held['failed']}); "
            "run that job again: it starts over and ends the hold when it finishes"
        )
    return f"held by pid {held.get('pid')} since {held.get('since')} ({held.get('reason')})"


def _now_iso() -> str:
    return datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")


@dataclass
class Held:
    """What a job under the hold tells it: ``at_risk`` once it has changed what a stream runs from
    (a replay, once it moved the checkpoint aside): a failure from then on leaves the hold."""

    at_risk: bool = True


@contextlib.contextmanager
def hold(spec: JoinSpec, s: Settings | None = None, *, reason: str) -> Iterator[Held]:
    """While held, supervisors neither start nor restart the pipeline's stream process and
    scheduled increments skip: a replay owns the checkpoint folder. Two live holds conflict; a
    failed one is taken over (running the job again is how it ends). If the body raises (Ctrl-C
    included) while at risk, the hold stays, marked ``failed``; before, it ends as it began."""
    other = current_hold(spec, s)
    if other is not None and not other.get("failed") and other.get("pid") != os.getpid():
        raise CheckpointBusy(f"{spec.pipeline} is already {describe_hold(other)}")
    if other is not None and other.get("failed"):
        log.info("%s: taking over the hold of a job that failed (%s)", spec.pipeline, other["failed"])
    path = hold_file(spec, s)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"pid": os.getpid(), "tag": process_tag(os.getpid()), "since": _now_iso(), "reason": reason}
    _write(path, rec)
    held = Held()
    try:
        yield held
    except BaseException as e:
        if held.at_risk:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            _write(path, {**rec, "failed": f"{why[:300]} (at {_now_iso()})"})
        elif other is not None and other.get("failed"):  # what the earlier failure left is still there
            _write(path, other)
        else:
            path.unlink(missing_ok=True)
        raise
    path.unlink(missing_ok=True)


def _write(path: Path, rec: dict[str, Any]) -> None:
    """Whole or not at all: a reader never sees half a record (which it would take for no hold)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(rec) + "\n")
    os.replace(tmp, path)


def supervised_stream_pid(spec: JoinSpec, s: Settings | None = None) -> int | None:
    """The pid of the pipeline's supervised stream process (its pid file), if it still runs."""
    try:
        pid = json.loads((supervisor_dir(spec, s) / "stream.pid").read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return int(pid) if pid_alive(pid) else None


#: How long a stream waits for the checkpoint of an owner that is no longer running (its last
#: threads still exiting) before it reports the checkpoint busy.
EXITING_OWNER_WAIT_S = 10


class CheckpointBusy(RuntimeError):
    """Another process runs the pipeline's stream queries; the message names it and what to do."""


@contextlib.contextmanager
def stream_owner(
    spec: JoinSpec, s: Settings | None = None, *, role: str, wanted: str = "starting another"
) -> Iterator[None]:
    """Own the pipeline's checkpoint while running its stream queries (``role`` says as what:
    "continuous", "increment", "replay", "backup"); :class:`CheckpointBusy` if another process
    owns it, its message ending "stop that one before ``wanted``"."""
    folder = supervisor_dir(spec, s)
    folder.mkdir(parents=True, exist_ok=True)
    lock, owner = folder / "stream.lock", folder / "stream.owner.json"
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        released_by = time.monotonic() + EXITING_OWNER_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                try:
                    other = json.loads(owner.read_text())
                except (OSError, ValueError):
                    other = {}
            # an owner that was just stopped holds the lock until its last thread has exited, a
            # moment after its main thread (which is all a process check sees)
            if not pid_alive(other.get("pid")) and time.monotonic() < released_by:
                time.sleep(0.1)
                continue
            raise CheckpointBusy(
                f"{spec.pipeline}'s checkpoint is in use by pid {other.get('pid', '?')} ({other.get('role', '?')}, "
                f"since {other.get('since', '?')}): run one stream at a time; stop that one "
                f"(or pause the joinshift_stream DAG) before {wanted}"
            ) from None
        since = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
        owner.write_text(json.dumps({"pid": os.getpid(), "role": role, "since": since}) + "\n")
        yield
    finally:
        os.close(fd)  # releases the lock
