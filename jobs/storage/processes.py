"""Process liveness and identity (psutil): is a recorded pid still the process we started?"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

import psutil


def pid_alive(pid: int | None) -> bool:
    """Alive and not a zombie (a child that exited stays a zombie until reaped; it is reaped here
    when it is ours, so it does not linger)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            if pid in {c.pid for c in psutil.Process().children()}:
                proc.wait(timeout=0)
            return False
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        return False
    except psutil.AccessDenied:
        return True
    return True


def cmdline(pid: int, settle_s: float = 2.0) -> str:
    """The process's command line, space-joined; "" when it is gone or unreadable.

    A process caught inside its exec reads an empty command line until the kernel has put its new
    arguments in place, and under load that can last a second: a supervisor's poke right after
    a start then took its own stream process for another and started a second one. An empty
    line is read again until ``settle_s``."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            args = psutil.Process(pid).cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return ""
        if args or time.monotonic() >= deadline:
            return " ".join(args)
        time.sleep(0.01)


_PROC = Path("/proc/self/stat").exists()


def process_tag(pid: int) -> str:
    """A name for a process that a later process with the same pid does not share: its pid and
    its start time, in clock ticks since boot as the kernel keeps it (``/proc/<pid>/stat``), not
    psutil's wall-clock time, which moves when the clock is set and would rename a live process.
    Without ``/proc``, psutil's."""
    if not _PROC:
        return f"{pid}-{round(psutil.Process(pid).create_time() * 100)}"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        raise psutil.NoSuchProcess(pid) from None
    return f"{pid}-{stat[stat.rindex(')') + 2 :].split()[19]}"


def tag_alive(tag: str) -> bool | None:
    """Whether the process :func:`process_tag` named ``tag`` still runs; None when ``tag`` is not
    such a name (or the process cannot be inspected)."""
    pid, sep, started = tag.partition("-")
    if not (sep and pid.isdigit() and started.isdigit()):
        return None
    try:
        return pid_alive(int(pid)) and process_tag(int(pid)) == tag
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return None


def pid_namespace() -> str:
    """Where pids mean the same processes: this boot of this kernel and its PID namespace (a
    container has its own). Elsewhere (no ``/proc``) the host's name."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
        ns = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return socket.gethostname()
    return f"{boot}-{ns.removeprefix('pid:[').removesuffix(']')}"


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants as they are now (none when it is gone)."""
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def busy_cores(pid: int, seconds: float = 2.0) -> float:
    """The cores the process and its descendants (a stream's JVM) kept busy over ``seconds``."""

    def used(procs: list[psutil.Process]) -> dict[int, float]:
        out = {}
        for q in procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                t = q.cpu_times()
                out[q.pid] = t.user + t.system + t.children_user + t.children_system
        return out

    before = used(process_tree(pid))
    time.sleep(seconds)
    after = used(process_tree(pid))
    return sum(max(0.0, after[k] - before.get(k, 0.0)) for k in after) / seconds


def still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` that have not exited (a zombie has). psutil checks each one's start
    time, so a reused pid is not taken for it."""

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
        except psutil.NoSuchProcess:
            return False
        except psutil.AccessDenied:
            return True

    return [p for p in procs if running(p)]


def wait_gone(procs: list[psutil.Process], timeout: float, step: float = 0.1) -> list[psutil.Process]:
    """Wait until every process of ``procs`` has exited; those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := still_running(procs)) and time.monotonic() < deadline:
        time.sleep(step)
    return left


def describe(procs: list[psutil.Process]) -> str:
    """``name (pid)`` of each, for a message."""
    out = []
    for p in procs:
        try:
            out.append(f"{' '.join(p.cmdline()[:3]) or p.name()} ({p.pid})")
        except psutil.Error:
            out.append(f"pid {p.pid}")
    return ", ".join(out)
