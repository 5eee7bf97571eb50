"""A job that only has to be still training when something else ends it (a SLURM time limit,
`scancel`, a lost node, a requeue's second run) need not take the CPU meanwhile: `Paced`
sleeps after every step, so such a job waits asleep instead of slowing the tests beside it
on the same two cores. Its steps, evaluations, checkpoints and signals are a real job's."""

from __future__ import annotations

import time

from sporeflow.engine.hooks import HookBase


class Paced(HookBase):
    def __init__(self, seconds: float):
        self.seconds = seconds

    def after_step(self, step: int) -> None:
        time.sleep(self.seconds)


def paced(seconds: float = 0.05) -> str:
    """The `callbacks.hooks` override of a job that sleeps `seconds` after every step (the
    job's processes need the tests folder on PYTHONPATH to import it)."""
    return f"callbacks.hooks=[{{_target_: helpers.pace.Paced, seconds: {seconds}}}]"
