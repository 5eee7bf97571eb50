"""What SLURM does to a job near its time limit, in this process: a hook that sends the
process SIGUSR2 (SLURM's warning, `--signal=USR2@<delay>`) after a chosen step, so a test
stops a job at an exact step (`SignalAtStep`; for a parallel job's workers,
`WarnLauncherAtStep`); the environment a job has in SLURM after a requeue; and the arming that
sporeflow's SLURM launcher does in a job's process (`armed`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil

from sporeflow.engine.hooks import HookBase


class SignalAtStep(HookBase):
    """SIGUSR2 to this process and every process it started (SLURM signals every process of a
    job step: the tracking writer too) once the stage's global step reaches `step`."""

    def __init__(self, step: int):
        self.step = step

    def after_step(self, step: int) -> None:
        if step != self.step:
            return
        for child in psutil.Process().children(recursive=True):
            child.send_signal(signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR2)


class WarnLauncherAtStep(HookBase):
    """In rank 0 of a parallel job: SIGUSR2 to the launcher (`pid`, as SLURM warns the job)
    once the stage's global step reaches `step`, then rank 0 waits until the launcher has
    passed the warning on (`flag` exists). The other ranks go on meanwhile: they stop at this
    step only if the ranks agree on it (without, they would wait in step + 1 for rank 0)."""

    def __init__(self, step: int, pid: int, flag: str):
        self.step, self.pid, self.flag = step, pid, Path(flag)

    def after_step(self, step: int) -> None:
        from mindspore.communication import get_rank

        if step != self.step or get_rank() != 0:
            return
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while not self.flag.exists():
            assert time.monotonic() < deadline, "the launcher never passed the warning on"
            time.sleep(0.05)


def warn_launcher_at(step: int, pid: int, flag: Path) -> str:
    """The `callbacks.hooks` override of a parallel job whose launcher is warned after `step`."""
    return (
        "callbacks.hooks=[{_target_: helpers.requeue.WarnLauncherAtStep, "
        f"step: {step}, pid: {pid}, flag: '{flag}'}}]"
    )


@contextlib.contextmanager
def armed():
    """SIGUSR2 asks for a requeue, as sporeflow's SLURM launcher arms it in a job; yields
    `arm(requeues_before)`; the handler before is put back at the end."""
    from sporeflow.core import signals

    before = signal.getsignal(signal.SIGUSR2)
    try:
        yield lambda restarts: signals.requeue_on(signal.SIGUSR2, restarts)
    finally:
        signals.requeue_off(signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, before)


def signal_at(step: int) -> str:
    """The `callbacks.hooks` override of a job that is warned after `step`."""
    return f"callbacks.hooks=[{{_target_: helpers.requeue.SignalAtStep, step: {step}}}]"


def slurm_env(restarts: int) -> dict[str, str]:
    """A SLURM job's environment (launch.slurm.in_slurm) after `restarts` requeues."""
    return {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "node0",
        "SLURM_RESTART_COUNT": str(restarts),
    }
