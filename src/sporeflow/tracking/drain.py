"""Waiting for a tracking writer process while it gets on (a run's end, a sweep's end).

A timeout counts the seconds in which the writer neither applied a record nor computed (a store
that is busy or down: the writer sleeps between tries), not those in which a niced writer waits
its turn on a busy machine; training never fails because tracking is slow, and the journal
keeps whatever is left.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_while_progressing(
    pid: int,
    applied: Callable[[], int],
    timeout: float,
    done: Callable[[], bool],
    on_idle: Callable[[], None] = lambda: None,
) -> bool:
    """Wait until `done()` (True), or until writer `pid` made no progress (`applied()` did not
    grow and it did not compute) for `timeout` seconds (False). `on_idle()` is called after
    each window of a couple of seconds without progress (to say what the wait is)."""
    window = WriterWindow(pid, applied, timeout)
    idle_since = time.monotonic()
    while not done():
        time.sleep(0.2)
        if window.closed() and window.progressed():
            idle_since = time.monotonic()
        elif window.closed():
            on_idle()
        if window.closed():
            window = WriterWindow(pid, applied, timeout)
        if time.monotonic() - idle_since > timeout:
            return done()
    return True


def drain(
    writer: subprocess.Popen,
    applied: Callable[[], int],
    timeout: float,
    on_idle: Callable[[], None] = lambda: None,
) -> None:
    """Wait for `writer` to end while it progresses; then SIGTERM (it stops after the write in
    progress), and SIGKILL if even that does not end it."""
    wait_while_progressing(writer.pid, applied, timeout, lambda: writer.poll() is not None, on_idle)
    if writer.poll() is None:
        writer.terminate()
        try:
            writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.wait()


class WriterWindow:
    """A couple of seconds of a writer's life: did it apply a record, or compute (at least
    WORKING_SHARE of a core)? A writer retrying a store that is down uses almost none."""

    WORKING_SHARE = 0.05

    def __init__(self, pid: int, applied: Callable[[], int], timeout: float):
        self.pid, self.applied = pid, applied
        # shorter than the timeout it feeds, long enough for the CPU clock's 10 ms ticks
        self.seconds = max(0.2, min(2.0, timeout / 2))
        self.start, self.seq, self.cpu = time.monotonic(), applied(), self._cpu()

    def _cpu(self) -> float:
        import psutil

        try:
            return float(sum(psutil.Process(self.pid).cpu_times()[:2]))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return 0.0

    def closed(self) -> bool:
        return time.monotonic() - self.start >= self.seconds

    def progressed(self) -> bool:
        elapsed = time.monotonic() - self.start
        computed = self._cpu() - self.cpu >= self.WORKING_SHARE * elapsed
        return self.applied() > self.seq or computed
