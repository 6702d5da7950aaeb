"""A driver's scratch folder: Spark's local dirs (the block manager's files, the state stores'
RocksDB working copies, the jars a local driver copies for its executor) and the JVM's temporary
files (native libraries it unpacks), one folder per process, named by its pid and start time,
under ``<temp dir>/joinshift-scratch/<pid namespace>/`` (the system's temp dir, ``TMPDIR``, as
Spark's own default; one folder per boot and PID namespace, so a container or a machine sharing the
temp dir never judges another's pids).

Spark deletes its local dirs from a JVM shutdown hook, which a SIGKILL skips: the kernel's OOM
killer, a container killed, a stream process that did not stop within the supervisor's grace
(SIGKILL to its process group). Each such death left its folders
loose in ``/tmp``: 58-85 MB for the test suite's small streams (~35 MB of them jar copies) and the
whole working copy of a large state, once per restart. So a driver removes the scratch folders of
processes that are gone before it starts, and its own when its process exits.

A ``spark.local.dir`` in ``spark_conf`` (or ``SPARK_LOCAL_DIRS``, which Spark prefers) is the
user's: Spark's local dirs then go there, unmanaged, and only the JVM's temporary files come here.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from jobs.storage.processes import pid_namespace, process_tag, tag_alive

log = logging.getLogger("joinshift.scratch")

LOCAL_DIR = "spark.local.dir"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_TMPDIR = "-Djava.io.tmpdir="


def scratch_root() -> Path:
    """The scratch folders of this PID namespace's drivers."""
    return Path(tempfile.gettempdir()) / "joinshift-scratch" / pid_namespace()


def scratch_dir(root: Path | None = None) -> Path:
    """This process's scratch folder (not created here)."""
    return (root or scratch_root()) / process_tag(os.getpid())


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the scratch folders of processes that are gone; the folders removed. A folder whose
    name is not a process tag is not ours to judge, and is left."""
    root = root or scratch_root()
    if not root.is_dir():
        return []
    gone = [d for d in root.iterdir() if d.is_dir() and tag_alive(d.name) is False]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    if gone:
        log.info("removed %d scratch folder(s) of Spark drivers that are gone, under %s", len(gone), root)
    return gone


def driver_scratch(conf: dict[str, str], root: Path | None = None) -> dict[str, str]:
    """The settings that put a driver's local dirs and temporary files in this process's scratch
    folder (created here), after :func:`sweep`; what ``conf`` (the driver's settings so far)
    already decides is kept."""
    sweep(root)
    own = scratch_dir(root)
    own.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    if LOCAL_DIR not in conf:
        out[LOCAL_DIR] = str(own)
    options = conf.get(JAVA_OPTIONS, "")
    if _TMPDIR not in options:
        out[JAVA_OPTIONS] = f"{options} {_TMPDIR}{own}".strip()
    return out


def remove_own(root: Path | None = None) -> None:
    """Remove this process's scratch folder (at exit, once its driver has stopped)."""
    shutil.rmtree(scratch_dir(root), ignore_errors=True)


__all__ = ["driver_scratch", "remove_own", "scratch_dir", "scratch_root", "sweep"]
