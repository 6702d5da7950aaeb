"""Process liveness and identity (psutil): is a recorded pid still the process we started?"""

from __future__ import annotations

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


def cmdline(pid: int) -> str:
    """The process's command line, space-joined; "" when it is gone or unreadable."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""
