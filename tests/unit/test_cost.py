"""What a stage spent (engine.cost), the budget arm's allowance (stages.budget) and the arms'
curves against cost (report.cost_report), worked by hand: passes, the snapshots' and PCA's
seconds converted at stage 1's seconds per pass, the seconds unit from both arms' measured
seconds per step, and the first pass that reaches a target."""

from __future__ import annotations

import math

import pytest

from sporeflow.engine.cost import FORWARD_SHARE, Cost, seconds_as_passes
from sporeflow.stages.budget import BudgetError, budget_of

# stage 1: 16 epochs x 100 plain steps in 40 s, snapshots 2 s; stage 2: 2 epochs x 100 steps,
# 130 of them accepted r = 1 (one trial forward), 70 took two, in 12 s
STAGE1 = Cost(
    step_seconds=40.0,
    snapshot_seconds=2.0,
    steps=1600,
    forward_passes=1600,
    backward_passes=1600,
    optimizer_steps=1600,
    images=1600 * 64,
)
STAGE2 = Cost(
    step_seconds=12.0,
    steps=200,
    forward_passes=200 + 130 + 2 * 70,
    backward_passes=200,
    optimizer_steps=200,
    images=200 * 64,
)


def test_a_stage2_step_costs_one_pass_and_a_third_per_trial_forward():
    assert FORWARD_SHARE == pytest.approx(1 / 3)
    assert STAGE2.passes == pytest.approx(200 + (130 + 140) / 3)
    assert STAGE1.passes == 1600 and STAGE1.seconds_per_pass == pytest.approx(40 / 1600)
    assert seconds_as_passes(2.0, STAGE1) == pytest.approx(2.0 / (40 / 1600))


def test_a_budget_in_passes_is_stage2s_passes_with_its_snapshots_and_pca():
    budget = budget_of("passes", STAGE1, STAGE2, pca_seconds=3.0, plain_epochs=2)
    per_pass = 40 / 1600
    overhead = (2.0 + 3.0) / per_pass  # 200 passes stage 1 could have trained instead
    assert budget.overhead_passes == pytest.approx(overhead)
    assert budget.passes == pytest.approx(STAGE2.passes + overhead)
    assert budget.steps == round(STAGE2.passes + overhead)  # a plain step is one pass
    assert abs(budget.steps - budget.passes) <= 0.5
    assert budget.steps_per_epoch == 100 and budget.epochs == math.ceil(budget.steps / 100)
    assert budget.ratio == pytest.approx(budget.steps / 200)
    assert (
        budget.describe()
        == f"{budget.steps / 200:.2f}x the passes of 2 plain epochs: {budget.steps} steps"
    )
    assert budget.tags()["budget.steps"] == str(budget.steps)


def test_a_budget_in_seconds_takes_its_steps_from_stage1s_seconds_per_step():
    budget = budget_of("seconds", STAGE1, STAGE2, pca_seconds=3.0, plain_epochs=2)
    seconds = 12.0 + 2.0 + 3.0
    assert budget.seconds == pytest.approx(seconds)
    assert budget.steps == round(seconds / (40 / 1600))
    tags = budget.tags()
    assert float(tags["budget.stage1_seconds_per_step"]) == pytest.approx(40 / 1600)
    assert float(tags["budget.stage2_seconds_per_step"]) == pytest.approx(12 / 200)
    assert tags["budget.unit"] == "seconds"


def test_no_stage2_step_is_no_budget_and_an_unmeasured_stage1_no_seconds_budget():
    with pytest.raises(BudgetError, match="stage 2 took no step"):
        budget_of("passes", STAGE1, Cost(), 0.0, 2)
    with pytest.raises(BudgetError, match="seconds per step are unknown"):
        budget_of("seconds", Cost(), STAGE2, 0.0, 2)
    # a stage 1 of an older run (no cost recorded): its snapshots and PCA count nothing
    assert budget_of("passes", Cost(), STAGE2, 5.0, 2).overhead_passes == 0.0


def test_a_cost_survives_its_runs_metrics():
    assert Cost.from_metrics(STAGE2.metrics()) == STAGE2
    assert STAGE2.metrics()["cost/passes"] == pytest.approx(STAGE2.passes)
    assert Cost.from_metrics({}) == Cost()


def test_an_arms_curve_starts_at_stage1s_end_and_its_target_is_the_first_pass_reaching_it():
    from sporeflow.report.cost_report import arm_curve, passes_to_target

    history = [
        (1, {"acc": 0.80, "passes": 45.0}),
        (2, {"acc": 0.91, "passes": 90.0}),
        (3, {"acc": 0.90}),
    ]
    curve = arm_curve(history, offset=12.5, start_acc=0.85)
    assert curve == [
        (0.0, 0.85),
        (57.5, 0.80),
        (102.5, 0.91),
    ]  # an eval without its cost is left out
    assert passes_to_target(curve, 0.85) == 0.0  # stage 1 already had it
    assert passes_to_target(curve, 0.9) == 102.5
    assert math.isinf(passes_to_target(curve, 0.95))  # never reached: infinite (AlgoPerf)
