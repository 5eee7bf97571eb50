"""Servers the tests start for real (mlflow server, sporeflow server): a free loopback port and
waiting until one answers its health check."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(
    url: str, proc: subprocess.Popen, timeout: float = 90, path: str = "/health"
) -> None:
    """Return once GET <url><path> answers 200; stop the server's group and raise otherwise."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}{path}", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError(f"{url} did not answer {path} within {timeout:.0f} s")


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM to the server's process group (it was started with start_new_session=True)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=timeout)
