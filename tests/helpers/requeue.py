"""What SLURM does to a job near its time limit, in this process: a hook that sends the
process SIGUSR2 (SLURM's warning, `--signal=USR2@<delay>`) after a chosen step, so a test
stops a job at an exact step; and the environment a job has in SLURM after a requeue."""

from __future__ import annotations

import os
import signal

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
