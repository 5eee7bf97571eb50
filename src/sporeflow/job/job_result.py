"""What a job hands back to whoever ran it (train.py's Hydra task, a sweeper, the Python API):
the same whether MLflow recorded it or tracking was off. Imports no MindSpore: the entry reads
it before any training process exists."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class JobResult:
    """`metrics`: the job's results as its top-level run records them (a plain job's
    `final/val/acc`, `test/acc`, `cost/passes`; a pipeline's `val/stage2/acc`, `test/gain`,
    ...); `objective`: `sweep.objective` of them (a list objective: [accuracy, cost])."""

    metrics: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None  # the top-level MLflow run (a pipeline's parent); None: not tracked
    weights: Path | None = None  # the final weights (a pipeline's: stage 2's)
    objective: float | list[float] = float("nan")
