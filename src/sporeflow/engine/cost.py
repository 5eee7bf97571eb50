"""What a stage spent, in units a user can compare across arms: wall seconds split into
compile, steps, evaluation and snapshots; train-cell steps, optimizer updates, forward and
backward passes over a batch, training images seen.

`passes` is the cost in forward+backward passes of one batch: a backward pass costs about two
forward passes (its FLOPs: the gradients of activations and of weights), so a forward pass
alone counts 1/3 (`FORWARD_SHARE`). A plain step is 1 pass; a stage-2 step is 1 + 1/3 or
1 + 2/3 (the line search's trial forwards, counted in the graph by DimReduceStep).
Seconds that are not passes (snapshots, the PCA) are converted at the measured seconds per
pass of the stage that pays them (`seconds_as_passes`).

Seconds (this process's): `compile_seconds` is the stage's first step beyond an ordinary one
(graph compilation; the evaluation graph's compile stays in `eval_seconds`), `step_seconds`
the rest of the time between a step's start and its end (data, the step, the callbacks of a
step), less the snapshots' own `snapshot_seconds`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase

FORWARD_SHARE = 1.0 / 3.0  # a forward pass alone, in forward+backward passes
PREFIX = "cost/"  # the stage run's metrics: cost/passes, cost/step_seconds, ...


@dataclass
class Cost:
    """One stage's spending (zero for a stage that trains nothing)."""

    compile_seconds: float = 0.0
    step_seconds: float = 0.0
    eval_seconds: float = 0.0
    snapshot_seconds: float = 0.0
    steps: int = 0  # train-cell calls (micro-batches)
    optimizer_steps: int = 0
    forward_passes: int = 0  # of one batch: one per step, plus stage 2's trial forwards
    backward_passes: int = 0
    images: int = 0  # training images seen (all workers)

    @property
    def passes(self) -> float:
        """Forward+backward passes: each backward with its forward is 1, a forward alone 1/3."""
        extra = self.forward_passes - self.backward_passes
        return self.backward_passes + FORWARD_SHARE * extra

    @property
    def seconds_per_pass(self) -> float:
        return self.step_seconds / self.passes if self.passes else math.nan

    @property
    def seconds_per_step(self) -> float:
        return self.step_seconds / self.steps if self.steps else math.nan

    def metrics(self) -> dict[str, float]:
        """As a run records them: `cost/<field>` and `cost/passes`."""
        found = {f"{PREFIX}{k}": float(v) for k, v in asdict(self).items()}
        found[f"{PREFIX}passes"] = self.passes
        return found

    @classmethod
    def from_metrics(cls, metrics: dict) -> Cost:
        """From a run's metrics (a reused stage carries the cost of the run it reused);
        missing fields are 0 (a run of an older sporeflow)."""
        found: dict[str, Any] = {}
        for f in fields(cls):
            key = f"{PREFIX}{f.name}"
            if key in metrics:
                found[f.name] = (int if f.type in (int, "int") else float)(metrics[key])
        return cls(**found)


def seconds_as_passes(seconds: float, payer: Cost) -> float:
    """Seconds of work that are not passes (snapshots, PCA), at the payer's seconds per pass."""
    per_pass = payer.seconds_per_pass
    return seconds / per_pass if seconds and per_pass > 0 else 0.0


class CostMeter(HookBase):
    """Measures a stage's Cost while it trains. Counts come from the stage's global step (so a
    resumed stage counts its earlier steps) and `extra_forwards()` (stage 2's trial forwards,
    a parameter of its train cell: restored with its checkpoint); seconds are this process's.
    At each epoch end it records `cost/passes` at the global step, so every evaluation has its
    cumulative cost beside it. Runs after the snapshot callback, so a snapshot's seconds fall
    into the step that took it and are subtracted (`snapshot_seconds()`)."""

    def __init__(
        self,
        record: EventRecord,
        global_batch: int,
        accumulation_steps: int = 1,
        extra_forwards: Callable[[], float] = lambda: 0.0,
        snapshot_seconds: Callable[[], float] = lambda: 0.0,
        eval_seconds: Callable[[], float] = lambda: 0.0,
    ):
        super().__init__()
        self.bind(record)
        self.global_batch = global_batch
        self.accumulation_steps = accumulation_steps
        self.extra_forwards = extra_forwards
        self.snapshot_seconds, self.eval_seconds = snapshot_seconds, eval_seconds
        self._step = record.steps_before
        self._start: float | None = None
        self._first: float | None = None  # the first step's seconds (compile + a step)
        self._rest = 0.0  # the other steps' seconds
        self._rest_n = 0
        self.by_epoch: dict[int, float] = {}  # epoch -> cumulative passes at its end

    def before_epoch(self, epoch: int) -> None:
        self._start = None  # evaluation and checkpoints between epochs are not steps

    def before_step(self) -> None:
        if self._start is None:
            self._start = time.perf_counter()

    def after_step(self, step: int) -> None:
        now = time.perf_counter()
        if self._start is not None:
            seconds = now - self._start
            if self._first is None:
                self._first = seconds
            else:
                self._rest += seconds
                self._rest_n += 1
        self._start = now
        self._step = step

    def after_epoch(self, epoch: int) -> None:
        passes = self.cost().passes
        self.by_epoch[epoch] = passes
        self.record.put(f"{PREFIX}passes", passes, self.record.global_step(self.cb_params))

    def cost(self) -> Cost:
        typical = self._rest / self._rest_n if self._rest_n else (self._first or 0.0)
        first = self._first or 0.0
        compile_seconds = max(0.0, first - typical)
        snapshots = self.snapshot_seconds()
        steps = self._step
        extra = int(round(self.extra_forwards()))
        return Cost(
            compile_seconds=compile_seconds,
            step_seconds=max(0.0, first + self._rest - compile_seconds - snapshots),
            eval_seconds=self.eval_seconds(),
            snapshot_seconds=snapshots,
            steps=steps,
            optimizer_steps=steps // self.accumulation_steps,
            forward_passes=steps + extra,
            backward_passes=steps,
            images=steps * self.global_batch,
        )


class StopAtStep(HookBase):
    """Ends a stage after `max_steps` global steps (a budget that is not whole epochs): MindSpore
    leaves the epoch there and still runs its epoch end (evaluation, checkpoint)."""

    def __init__(self, record: EventRecord, max_steps: int):
        super().__init__()
        self.bind(record)
        self.max_steps = max_steps

    def after_step(self, step: int) -> None:
        if step >= self.max_steps:
            self.stop()
