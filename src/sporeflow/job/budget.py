"""What stage 2 cost, as a budget for ordinary training: the budget arm gets it.

Stage 2 pays its own passes (engine.cost: a step with its line search's trial forwards) and,
before it starts, stage 1's snapshots and the PCA, counted in passes by engine.cost's rule
(`Overhead`: from the snapshots N, the components k, the weights P, the network's forward MACs
and the batch; never timed). Stage 2's run records that total as its `cost/passes`.
`boost.budget_unit` says how the budget arm's steps follow from it:
- `passes` (default, reproducible: the same stage 1 and settings give the same steps on any
  machine at any load): steps = round(stage 2's `cost/passes`), one pass per plain step;
- `seconds` (measured, so it moves with the machine and its load): steps = round((stage 2's
  step seconds + snapshot seconds + PCA seconds) / stage 1's seconds per step); both per-step
  times are recorded on the budget arm's run, so a rerun can pin the step count (graph
  compilation is left out on both sides: each arm compiles once).
Imports no MindSpore."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sporeflow.core.errors import SporeflowError
from sporeflow.engine.cost import Cost, Overhead


class BudgetError(SporeflowError):
    """Stage 2 left no cost to give the budget arm (it trained nothing)."""


@dataclass(frozen=True)
class Budget:
    """The budget arm's allowance and the figures it came from."""

    unit: str  # passes | seconds
    stage2_passes: float  # its steps' passes
    overhead: Overhead  # stage 1's snapshots and the PCA, by the rule
    seconds: float  # stage 2's step seconds + snapshot + PCA seconds (measured: a figure)
    stage1_seconds_per_step: float
    stage2_seconds_per_step: float
    steps: int  # the budget arm trains exactly these
    steps_per_epoch: int
    plain_epochs: int  # boost.epochs: what the equal-epoch arms train

    @property
    def overhead_passes(self) -> float:
        return self.overhead.passes

    @property
    def passes(self) -> float:
        """Stage 2's `cost/passes`: its steps' passes and the overhead."""
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
            **{f"budget.{k}": v for k, v in self.overhead.tags().items()},
        }


def budget_of(
    unit: str,
    stage1: Cost,
    stage2: Cost,
    overhead: Overhead,
    plain_epochs: int,
    pca_seconds: float = 0.0,
) -> Budget:
    """The budget arm's allowance from what stage 2 spent and the overhead (by the rule);
    stage 1's seconds per step, its snapshot seconds and `pca_seconds` only for
    `unit=seconds` (and as figures)."""
    if stage2.steps <= 0:
        raise BudgetError("stage 2 took no step: there is no budget to give the budget arm")
    seconds = stage2.step_seconds + stage1.snapshot_seconds + pca_seconds
    per_step = stage1.seconds_per_step
    if unit == "passes":
        steps = round(stage2.step_passes + overhead.passes)
    elif per_step > 0:
        steps = round(seconds / per_step)
    else:
        raise BudgetError("boost.budget_unit=seconds: stage 1's seconds per step are unknown")
    return Budget(
        unit,
        stage2.step_passes,
        overhead,
        seconds,
        per_step,
        stage2.seconds_per_step,
        max(1, steps),
        max(1, stage2.steps // plain_epochs),
        plain_epochs,
    )
