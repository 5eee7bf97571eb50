"""Which process is this, and is that one still alive: the facts behind run-dir claims and
behind closing MLflow runs whose process is gone. A pid alone is reused by the OS; pid + host
+ process start time is not."""
from __future__ import annotations

import os
import socket

import psutil


def this_process() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": psutil.Process().create_time()}


def is_alive(pid: int, host: str, started: float) -> bool | None:
    """True/False for a process of this host; None when it ran on another host (cannot tell)."""
    if host != socket.gethostname():
        return None
    try:
        return abs(psutil.Process(int(pid)).create_time() - float(started)) < 0.01
    except (psutil.Error, ValueError, TypeError):
        return False
