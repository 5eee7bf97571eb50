"""Hooks for tests: one that holds a resource for the length of training and must release it
however training ends, and one that interrupts training at a step as Ctrl-C would."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from sporeflow.core.signals import Interrupted
from sporeflow.engine.hooks import HookBase


class HoldsAFile(HookBase):
    """Opens `path` before training and closes it in after_train, writing how training ended."""

    def __init__(self, path: str):
        super().__init__()
        self.path = Path(path)
        self.held = None

    def before_train(self) -> None:
        self.held = self.path.open("w")
        self.held.write("held\n")

    def after_train(self) -> None:
        assert self.held is not None
        ended = "cleanly" if self.failure is None else type(self.failure).__name__
        self.held.write(f"released: {ended}\n")
        self.held.close()


class InterruptAt(HookBase):
    """Raises what sporeflow's SIGINT handler raises, after step `step`."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def after_step(self, step: int) -> None:
        if step == self.step:
            raise Interrupted(signal.SIGINT)


class LossSeen(HookBase):
    """Writes to `path`, after training, the latest `train/loss` the record held at each step
    end: where it runs among the stage's own hooks decides whether that is this step's."""

    def __init__(self, path: str):
        super().__init__()
        self.path = Path(path)
        self.seen: list[float | None] = []

    def after_step(self, step: int) -> None:
        self.seen.append(self.record.latest("train/loss"))

    def after_train(self) -> None:
        self.path.write_text(json.dumps(self.seen))


class LossSeenAtGuard(LossSeen):
    place = "guard"  # before anything is measured at this step


class LossSeenNowhere(LossSeen):
    place = "somewhere"
