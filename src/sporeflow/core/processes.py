"""Which process is this, is that one still alive (the facts behind run-dir claims and behind
closing MLflow runs whose process is gone: a pid alone is reused by the OS, pid + host +
process start time is not), and child process groups that end with the one that started them
(msrun and its workers, `sporeflow ui`'s mlflow server and its workers)."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, NoReturn

import psutil

from sporeflow.core.signals import parent_death_preexec


def this_process() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": psutil.Process().create_time(),
    }


def exit_without_teardown(code: int) -> NoReturn:
    """End this process after its threads and atexit handlers, before the interpreter's teardown.

    The handlers include MindSpore's own (an msrun worker leaves its cluster there: skipping
    them makes msrun's scheduler wait out its time-out and fail the job). The teardown after
    them (modules destroyed, the last collection, C++ destructors beside MindSpore's threads)
    is where MindSpore's msrun workers are known to crash once their work is done (SIGSEGV while
    "Garbage-collecting", mindspore-ai/hyper-parallel#397); nothing of sporeflow's runs there."""
    for thread in threading.enumerate():  # as the interpreter's exit: its threads end first
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    sys.stdout.flush()
    sys.stderr.flush()
    # what the interpreter itself calls at exit (logging.shutdown among them): no public name
    atexit._run_exitfuncs()  # noqa: SLF001
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def is_alive(pid: int | None, host: str | None, started: float | None) -> bool | None:
    """True/False for a process of this host; None when it ran on another host (cannot tell).
    Missing facts (a record written half, or by an older version) mean not alive; so does a
    zombie: it has ended, only its parent has not reaped it yet (a sweep's writer SIGKILLed
    stays one in the sweep's process, whose jobs would otherwise wait on it forever)."""
    if host != socket.gethostname():
        return None
    if pid is None or started is None:
        return False
    try:
        process = psutil.Process(int(pid))
        same = abs(process.create_time() - float(started)) < 0.01
        return same and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError, TypeError):
        return False


def is_running(pid: int) -> bool:
    """Whether process `pid` exists and has not ended (a zombie has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_group(cmd: list[str], **popen: Any) -> subprocess.Popen:
    """Start `cmd` as the leader of a new process group that gets SIGTERM when this process
    dies; `stop_group` ends the whole group (the leader's own children included)."""
    return subprocess.Popen(
        cmd, start_new_session=True, preexec_fn=parent_death_preexec(signal.SIGTERM), **popen
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(proc: subprocess.Popen, signum: int, grace: float = 30.0) -> None:
    """Pass `signum` to the process group `proc` leads and wait until the whole group is gone
    (the leader may exit while a child still ends its MLflow run); SIGKILL what is left after
    `grace` seconds."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        proc.wait()
        return
    deadline = time.monotonic() + grace
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_alive(proc.pid):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def signal_children(signum: int) -> list[psutil.Process]:
    """Pass `signum` to this process's children that act on it: the worker processes a
    launcher started (joblib's, submitit's local ones), not the helpers that ignore it (the
    resource trackers of multiprocessing and loky). Returns those signalled."""
    signalled = []
    for child in psutil.Process().children(recursive=False):
        try:
            if _ignores(child.pid, signum):
                continue
            child.send_signal(signum)
            signalled.append(child)
        except (psutil.NoSuchProcess, OSError):
            pass
    return signalled


def _ignores(pid: int, signum: int) -> bool:
    """Whether process `pid` ignores `signum` (Linux: the SigIgn mask in /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False
