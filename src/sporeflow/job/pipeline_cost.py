"""A dim-reduce pipeline's arms against their cost, on its parent run: each arm's passes and
seconds beside its accuracy (`<arm>/passes`, `<arm>/seconds`), its curve on one axis of
passes since stage 1's end (`cost_curve/<arm>`, step = passes), the budget the budget arm was
given (`budget_given/passes`, `budget_given/ratio`: over boost.epochs plain epochs), the cost
to reach `boost.target_acc` (`<arm>/passes_to_target`), and `cost.png`.

`<arm>/passes` is the arm's run's own `cost/passes`: for stage 2 that already holds stage 1's
snapshots and the PCA (counted by engine.cost's rule, never timed), so the parent's
`stage2/passes` is the budget the budget arm was given.

Where an arm starts on that axis: the trained baselines and the budget arm at 0 (stage 1's
final weights); stage 2 after stage 1's snapshots and the PCA (its own evaluations' passes
include them); the snapshot mean after the snapshots (by the same rule)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

from sporeflow.core.names import StageKind
from sporeflow.engine.cost import Overhead
from sporeflow.job.budget import Budget
from sporeflow.report.cost_report import (
    COST_CURVE_PREFIX,
    arm_curve,
    cost_metrics,
    cost_plot,
    cost_table,
    passes_to_target,
)
from sporeflow.runtime.mindspore_context import Worker
from sporeflow.stage.result import StageResult
from sporeflow.tracking.tracker import TrackedRun


class PipelineComparison(Protocol):
    """What the costs are read from: job.comparison.PipelineComparison (named here, not
    imported: the comparison imports this module)."""

    stages: dict[str, StageResult]
    parent: TrackedRun
    worker: Worker
    home: Path
    target_acc: float | None
    budget: Budget | None
    overhead: Overhead | None


STARTS_AT_STAGE1 = 0.0
GIVEN = "budget_given/"  # what the budget arm was allowed (`budget/passes`: what it spent)


def _offsets(pipeline: PipelineComparison) -> dict[str, float]:
    """Passes an arm waited for that its own run does not count: the snapshot mean's snapshots
    (stage 2 counts its overhead in its own cost/passes)."""
    overhead = pipeline.overhead
    return {StageKind.snapshot_mean: overhead.snapshot_passes if overhead is not None else 0.0}


def curves(
    pipeline: PipelineComparison, offsets: dict[str, float]
) -> dict[str, list[tuple[float, float]]]:
    """Every arm after stage 1: (passes since stage 1's end, acc), from stage 1's end point."""
    start = pipeline.stages[StageKind.stage1].metrics.get("acc")
    found = {}
    for name, result in pipeline.stages.items():
        if name == StageKind.stage1:
            continue
        if name == StageKind.snapshot_mean:  # evaluated once, after the snapshots
            acc = result.metrics.get("acc")
            found[name] = [(0.0, start), (offsets[name], acc)] if acc is not None else []
            continue
        found[name] = arm_curve(result.history, offsets.get(name, STARTS_AT_STAGE1), start)
    return {name: [p for p in curve if p[1] is not None] for name, curve in found.items()}


def log_costs(pipeline: PipelineComparison, metrics: dict, correct: dict) -> str:
    """Put every arm's cost (and the budget, the target's cost) into `metrics`, log the cost
    curves and figure on the parent; the cost table for the console."""
    offsets = _offsets(pipeline)
    costs = {name: r.cost for name, r in pipeline.stages.items()}
    metrics.update(cost_metrics(costs, offsets))
    arms = curves(pipeline, offsets)
    budget = pipeline.budget
    if budget is not None:
        metrics.update({GIVEN + "passes": budget.passes, GIVEN + "ratio": budget.ratio})
    target, reached = pipeline.target_acc, ""
    if target is not None:
        to_target = {name: passes_to_target(curve, target) for name, curve in arms.items()}
        metrics.update({f"{name}/passes_to_target": v for name, v in to_target.items()})
        reached = f"\n  passes since stage 1's end to reach acc {target}: " + ", ".join(
            f"{name} {'never' if math.isinf(v) else f'{v:.0f}'}" for name, v in to_target.items()
        )
    for name, curve in arms.items():
        for passes, acc in curve:
            pipeline.parent.log_metrics({f"{COST_CURVE_PREFIX}{name}": acc}, round(passes))
    if pipeline.worker.is_main:
        n_eval = len(correct[StageKind.stage2]) if StageKind.stage2 in correct else None
        title = "dim_reduce: accuracy against cost" + (
            f" (budget arm: {budget.describe()})" if budget else ""
        )
        plot = cost_plot(
            arms, pipeline.home / "cost.png", n_eval, budget.passes if budget else None, title
        )
        if plot is not None:
            pipeline.parent.log_artifact(plot)
    return cost_table(costs, metrics) + reached
