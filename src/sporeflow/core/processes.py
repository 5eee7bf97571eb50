"""Which process is this, and is that one still alive: the facts behind run-dir claims and
behind closing MLflow runs whose process is gone. A pid alone is reused by the OS; pid + host
+ process start time is not."""

from __future__ import annotations

import os
import socket

import psutil


def this_process() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": psutil.Process().create_time(),
    }


def is_alive(pid: int | None, host: str | None, started: float | None) -> bool | None:
    """True/False for a process of this host; None when it ran on another host (cannot tell).
    Missing facts (a record written half, or by an older version) mean not alive."""
    if host != socket.gethostname():
        return None
    if pid is None or started is None:
        return False
    try:
        return abs(psutil.Process(int(pid)).create_time() - float(started)) < 0.01
    except (psutil.Error, ValueError, TypeError):
        return False
