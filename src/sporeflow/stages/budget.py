"""What stage 2 cost, as a budget for ordinary training: the budget arm gets it.

Stage 2 pays its own passes (engine.cost: a step with its line search's trial forwards) and,
before it starts, stage 1's snapshots and the PCA. Those seconds are converted into passes at
stage 1's seconds per pass (the same network and batch, plain steps: what the budget arm
runs). `boost.budget_unit` says how the budget arm's steps follow from that:
- `passes` (default, deterministic): steps = round(stage 2's passes + snapshots + PCA as
  passes), one pass per plain step;
- `seconds`: steps = round((stage 2's step seconds + snapshots + PCA seconds) / stage 1's
  seconds per step); both per-step times are recorded on the budget arm's run, so a rerun can
  pin the step count (graph compilation is left out on both sides: each arm compiles once).
Imports no MindSpore."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sporeflow.core.errors import SporeflowError
from sporeflow.engine.cost import Cost, seconds_as_passes


class BudgetError(SporeflowError):
    """Stage 2 left no cost to give the budget arm (it trained nothing)."""


@dataclass(frozen=True)
class Budget:
    """The budget arm's allowance and the figures it came from."""

    unit: str  # passes | seconds
    stage2_passes: float
    overhead_passes: float  # stage 1's snapshots and the PCA, as passes
    seconds: float  # stage 2's step seconds + snapshots + PCA
    stage1_seconds_per_step: float
    stage2_seconds_per_step: float
    steps: int  # the budget arm trains exactly these
    steps_per_epoch: int
    plain_epochs: int  # boost.epochs: what the equal-epoch arms train

    @property
    def passes(self) -> float:
        return self.stage2_passes + self.overhead_passes

    @property
    def epochs(self) -> int:
        """Epochs the budget arm's steps reach into (its last one is cut at `steps`)."""
        return max(1, math.ceil(self.steps / self.steps_per_epoch))

    @property
    def ratio(self) -> float:
        """The budget over the passes of `plain_epochs` plain epochs."""
        return self.steps / (self.plain_epochs * self.steps_per_epoch)

    def describe(self) -> str:
        """e.g. `1.9x the passes of 2 plain epochs: 855 steps`."""
        what = "passes" if self.unit == "passes" else "seconds"
        return (
            f"{self.ratio:.2f}x the {what} of {self.plain_epochs} plain epoch"
            f"{'s' if self.plain_epochs != 1 else ''}: {self.steps} steps"
        )

    def tags(self) -> dict[str, str]:
        """On the budget arm's run: the unit, the budget and the steps it made."""
        return {
            "budget.unit": self.unit,
            "budget.passes": f"{self.passes:.3f}",
            "budget.stage2_passes": f"{self.stage2_passes:.3f}",
            "budget.overhead_passes": f"{self.overhead_passes:.3f}",
            "budget.seconds": f"{self.seconds:.3f}",
            "budget.stage1_seconds_per_step": f"{self.stage1_seconds_per_step:.6f}",
            "budget.stage2_seconds_per_step": f"{self.stage2_seconds_per_step:.6f}",
            "budget.steps": str(self.steps),
        }


def budget_of(
    unit: str, stage1: Cost, stage2: Cost, pca_seconds: float, plain_epochs: int
) -> Budget:
    """The budget arm's allowance from what stage 1 (snapshots, seconds per pass) and stage 2
    spent and the PCA took."""
    if stage2.steps <= 0:
        raise BudgetError("stage 2 took no step: there is no budget to give the budget arm")
    overhead_seconds = stage1.snapshot_seconds + pca_seconds
    overhead = seconds_as_passes(overhead_seconds, stage1)
    seconds = stage2.step_seconds + overhead_seconds
    per_step = stage1.seconds_per_step
    if unit == "passes":
        steps = round(stage2.passes + overhead)
    elif per_step > 0:
        steps = round(seconds / per_step)
    else:
        raise BudgetError("boost.budget_unit=seconds: stage 1's seconds per step are unknown")
    return Budget(
        unit,
        stage2.passes,
        overhead,
        seconds,
        per_step,
        stage2.seconds_per_step,
        max(1, steps),
        max(1, stage2.steps // plain_epochs),
        plain_epochs,
    )
