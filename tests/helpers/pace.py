"""A job that must still be training when something outside it happens (a time limit, a lost
node, another machine's look at the store) need not keep a core busy meanwhile: `PauseEachStep`
sleeps after every train step, so the job's wall stretches while its CPU stays that of a few
steps. Before it such jobs trained thousands of epochs flat out for minutes, CPU the rest of
the suite on two cores waited for (BENCHMARKS 11). Signals still arrive at once (a sleep is
interrupted for Python's handlers) and are acted on at the step's end, as in real training."""

from __future__ import annotations

import time

from sporeflow.engine.hooks import HookBase


class PauseEachStep(HookBase):
    """Sleep `seconds` after each train step (placed first, before the stage records the step)."""

    place = "guard"

    def __init__(self, seconds: float):
        self.seconds = seconds

    def after_step(self, step: int) -> None:
        time.sleep(self.seconds)


def paced(seconds: float) -> str:
    """The `callbacks.hooks` override of a job that pauses `seconds` after each step; the job's
    process needs the tests folder on PYTHONPATH (`helpers.train.TESTS`)."""
    return f"callbacks.hooks=[{{_target_: helpers.pace.PauseEachStep, seconds: {seconds}}}]"
