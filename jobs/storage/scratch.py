"""A driver's scratch folder: Spark's local dirs (the block manager's files, the state stores'
RocksDB working copies, the jars a local driver copies for its executor) and the JVM's temporary
files (native libraries it unpacks), one folder per process under
``Settings.local_path("scratch")``, named by the process's pid and start time.

Spark deletes its local dirs from a JVM shutdown hook, which a SIGKILL skips: the kernel's OOM
killer, a container killed, the supervisor's stop (SIGTERM to the stream's process group, then
SIGKILL for a JVM that outlives its Python parent, mid-hook). Each such death left its folders in
``/tmp``: 58-85 MB for the test suite's small streams (~35 MB of them jar copies) and the whole
working copy of a large state, once per restart. So a driver removes the scratch folders of
processes that are gone before it starts, and its own when its process exits.

A ``spark.local.dir`` in ``spark_conf`` (or ``SPARK_LOCAL_DIRS``, which Spark prefers) is the
user's: Spark's local dirs then go there, unmanaged, and only the JVM's temporary files come here.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from jobs.settings import Settings
from jobs.storage.processes import process_tag, tag_alive

log = logging.getLogger("joinshift.scratch")

LOCAL_DIR = "spark.local.dir"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_TMPDIR = "-Djava.io.tmpdir="


def scratch_root(s: Settings) -> Path:
    return s.local_path("scratch")


def scratch_dir(s: Settings) -> Path:
    """This process's scratch folder (not created here)."""
    return scratch_root(s) / process_tag(os.getpid())


def sweep(s: Settings) -> list[Path]:
    """Remove the scratch folders of processes that are gone; the folders removed. A folder whose
    name is not a process tag is not ours to judge, and is left."""
    root = scratch_root(s)
    if not root.is_dir():
        return []
    gone = [d for d in root.iterdir() if d.is_dir() and tag_alive(d.name) is False]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    if gone:
        log.info("removed %d scratch folder(s) of Spark drivers that are gone, under %s", len(gone), root)
    return gone


def driver_scratch(s: Settings, conf: dict[str, str]) -> dict[str, str]:
    """The settings that put a driver's local dirs and temporary files in this process's scratch
    folder (created here), after :func:`sweep`; what ``conf`` (the driver's settings so far)
    already decides is kept."""
    sweep(s)
    own = scratch_dir(s)
    own.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    if LOCAL_DIR not in conf:
        out[LOCAL_DIR] = str(own)
    options = conf.get(JAVA_OPTIONS, "")
    if _TMPDIR not in options:
        out[JAVA_OPTIONS] = f"{options} {_TMPDIR}{own}".strip()
    return out


def remove_own(s: Settings) -> None:
    """Remove this process's scratch folder (at exit, once its driver has stopped)."""
    shutil.rmtree(scratch_dir(s), ignore_errors=True)


__all__ = ["driver_scratch", "remove_own", "scratch_dir", "scratch_root", "sweep"]
